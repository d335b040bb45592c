"""Review of rounds 68/69 and the farm-CPU commit (review 72): what each found, failing first.

The node's word on what a binary imports (node/imports.py, readelf in shell: round 68) must say
the same on both paths for the same binary, and never nothing where the loader resolves imports
no section names; the linker's search of round 69 must read `-l` as nvcc and gcc do."""

from __future__ import annotations

import os
import shlex
import struct
import subprocess
from pathlib import Path

import pytest

from orchestrator.run import noderunner
from orchestrator.run.machine_code import RUNTIME_LOADERS, runtime_loads
from orchestrator.run.stages.inspect import imports_sh


def _said(python: bool, binary: Path, env: dict[str, str]) -> str:
    """What the node says of BINARY's imports: the python runner's say_imports, or the shell's."""
    if python:

        class Out:
            text = ""

            def say(self, line: str) -> None:
                self.text += line + "\n"

        out = Out()
        noderunner.say_imports(out, str(binary), list(RUNTIME_LOADERS), env)
        return out.text
    script = imports_sh(shlex.quote(str(binary)))
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def loader(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 64-bit binary that imports cuModuleLoadData from a stand-in libcuda.so.1."""
    folder = tmp_path_factory.mktemp("rv72imports")
    (folder / "cuda.c").write_text("int cuModuleLoadData(void **m, const void *i) { return 0; }\n")
    (folder / "k.c").write_text(
        "int cuModuleLoadData(void **, const void *);\nint main(void) { void *m; return cuModuleLoadData(&m, 0); }\n"
    )
    lib = ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(folder / "libcuda.so")]
    subprocess.run([*lib, str(folder / "cuda.c")], check=True)
    binary = folder / "k"
    subprocess.run(["gcc", "-o", str(binary), str(folder / "k.c"), f"-L{folder}", "-lcuda"], check=True)
    return binary


def _headers_stripped(binary: Path, into: Path) -> Path:
    """BINARY with no section headers (e_shoff, e_shnum, e_shstrndx 0): the loader needs none."""
    data = bytearray(binary.read_bytes())
    struct.pack_into("<Q", data, 40, 0)
    struct.pack_into("<HH", data, 60, 0, 0)
    into.write_bytes(data)
    return into


def _dynsym_retyped(binary: Path, into: Path) -> Path:
    """BINARY with its .dynsym section's type made PROGBITS: the loader reads DT_SYMTAB still."""
    data = bytearray(binary.read_bytes())
    (shoff,) = struct.unpack_from("<Q", data, 40)
    size, count = struct.unpack_from("<HH", data, 58)
    for at in range(shoff, shoff + size * count, size):
        if struct.unpack_from("<I", data, at + 4)[0] == 11:  # SHT_DYNSYM
            struct.pack_into("<I", data, at + 4, 1)
    into.write_bytes(data)
    return into


@pytest.mark.parametrize("python", [True, False], ids=["runner", "shell"])
@pytest.mark.parametrize("hide", [_headers_stripped, _dynsym_retyped], ids=["no-section-headers", "no-dynsym"])
def test_imports_no_section_names_are_never_nothing(loader: Path, tmp_path: Path, python: bool, hide) -> None:
    """A binary that imports cuModuleLoadData runs the same with its section headers stripped or
    its .dynsym retyped: the shell said its NEEDED lines and no import (a pass), the runner said
    nothing at all for the retyped one. Both now say its imports unread: no pass on them."""
    env = {"PATH": os.environ["PATH"]}
    assert "imports cuModuleLoadData" in runtime_loads(_said(python, loader, env))
    hidden = hide(loader, tmp_path / "k")
    said = _said(python, hidden, env)
    assert said == "@@farm imports-unread\n", said
