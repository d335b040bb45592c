"""Review of rounds 68/69 and the farm-CPU commit (review 72): what each found, failing first.

The node's word on what a binary imports (node/imports.py, readelf in shell: round 68) must say
the same on both paths for the same binary, and never nothing where the loader resolves imports
no section names; the linker's search of round 69 must read `-l` as nvcc and gcc do."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_redteam68 import _said

from orchestrator.classify import Evidence, classify
from orchestrator.config.capability import ComputeCapability
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.run.node import linked
from orchestrator.run.runtime_code import runtime_loads
from orchestrator.run.stages import build_links
from orchestrator.run.stages.build_links import library_search


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


SNAPSHOT = SimpleNamespace(compilers="", nvcc_path="/usr/local/cuda/bin/nvcc")


def test_nvcc_lists_in_one_value_are_its_libraries_and_folders() -> None:
    """nvcc hands the linker `-lm,dl` as -lm -ldl and `-L/opt/a,/opt/b` as two folders (its
    --dryrun says so): read whole, /opt/b was looked in by nobody and a libfoo.a in /usr/lib was
    listed in place of /opt/b's, the one linked, which rebuilt left the old binary reused."""
    got = library_search("/usr/local/cuda/bin/nvcc -o b a.cu -L/opt/a,/opt/b -lfoo,dl --library=rt", SNAPSHOT)
    assert got is not None
    assert got["dirs"] == ["/opt/a", "/opt/b"], got
    assert got["libs"] == [[f"lib{n}.so", f"lib{n}.a"] for n in ("foo", "dl", "rt")], got
    # g++ hands ld the value whole: its name is what ld looks for
    whole = library_search("g++ -o b a.cpp -lfoo,bar", SNAPSHOT)
    assert whole is not None and whole["libs"] == [["libfoo,bar.so", "libfoo,bar.a"]], whole


@pytest.mark.parametrize("option", ["-lto", "-ltoir", "-lib", "-link", "-ldir=/opt/libdevice", "-lineinfo"])
def test_nvcc_options_that_open_as_l_name_no_library(option: str) -> None:
    """`-lto` (--lto), `-lib`, `-ldir=X`: read as libraries (libto.a) they were found nowhere and
    the build was never reused; nvcc reads them as its options."""
    assert library_search(f"{{nvcc}} -O3 {option} -o b a.cu", SNAPSHOT) is None


@pytest.fixture
def hanging_compilers(tmp_path: Path) -> dict[str, str]:
    """A PATH whose compilers and ld never answer (wrappers stuck on a lock)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("gcc", "g++", "cc", "c++", "clang", "clang++", "ld"):
        (folder / name).write_text("#!/bin/sh\nexec sleep 600\n")
        (folder / name).chmod(0o755)
    return {"PATH": f"{folder}:{os.environ['PATH']}"}


def test_the_linkers_folders_asked_within_a_bound_in_python(
    hanging_compilers: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """node/linked.py asked each of 6 compilers and ld for 30 s each: 210 s past the build's own
    limit, more than its trip's margin. All of them now share one bound."""
    monkeypatch.setattr(linked, "ASK_TIMEOUT", 2)
    search = library_search("{nvcc} -o b a.cu -lm", SNAPSHOT)
    start = time.monotonic()
    found = linked.linked_files(search, hanging_compilers, str(tmp_path), [])
    assert time.monotonic() - start < 6
    assert found is not None and any(f.endswith(("/libm.so", "/libm.a")) for f in found), found


def test_the_linkers_folders_asked_within_a_bound_in_shell(
    hanging_compilers: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stages/build_links.py's shell asked them with no bound at all: a hanging wrapper held the
    build stage until its channel's timeout."""
    monkeypatch.setattr(build_links, "ASK_TIMEOUT", 4, raising=False)
    monkeypatch.setattr(build_links, "KILL_GRACE", 1, raising=False)
    search = library_search("{nvcc} -o b a.cu -lm", SNAPSHOT)
    script = build_links.linked_sh(search, []) + '; echo "rc=$?"; printf "%s\\n" "$lf"'
    start = time.monotonic()
    # its own session: a hang's sleeping compilers are ended with it, never left behind
    shell = subprocess.Popen(
        ["sh", "-c", script], cwd=tmp_path, env=hanging_compilers, stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, _ = shell.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.communicate()
        pytest.fail("the shell's ask of the linker's folders never ended")
    assert time.monotonic() - start < 20
    assert "rc=0" in stdout and ("/libm.so" in stdout or "/libm.a" in stdout), stdout


@pytest.mark.parametrize("python", [True, False], ids=["runner", "shell"])
def test_a_jit_variable_of_zero_with_spaces_is_zero_on_both_paths(loader: Path, python: bool) -> None:
    """CUDA_FORCE_PTX_JIT="0 " is 0 to the driver: the runner stripped it and passed, the shell
    said it unstripped and the cell went grey."""
    env = {"PATH": os.environ["PATH"], "CUDA_FORCE_PTX_JIT": "0 "}
    said = _said(python, loader, env).replace("@@farm imports cuModuleLoadData\n", "")
    assert runtime_loads(said) == "", said


def test_the_reason_names_the_cause_once_and_truly() -> None:
    """A pass under the login's CUDA_FORCE_PTX_JIT=1 read "...: code loaded at run time was not
    inspected", untrue of a JIT variable, its clauses chained by colons."""
    exp = Expectation(Outcome.PASS, "contract admits", cc=ComputeCapability.parse("8.0"))
    ev = Evidence(build_exit=0, inspect_exit=0, run_exit=0, pass_line=1, kernel_started=True)
    ev.runtime_code = runtime_loads("@@farm cuda-env CUDA_FORCE_PTX_JIT=1\n")
    verdict = classify(ev, exp)
    assert verdict.outcome is Outcome.INFRA_ERROR, verdict
    assert "loaded at run time" not in verdict.reason, verdict.reason
    assert verdict.reason.count("CUDA_FORCE_PTX_JIT=1") == 1, verdict.reason
    assert "need not be what the card ran" in verdict.reason, verdict.reason


@pytest.mark.parametrize("python", [True, False], ids=["runner", "shell"])
def test_a_library_whose_name_holds_a_space_is_not_dropped(tmp_path: Path, python: bool) -> None:
    """A binary that needs `libmy gpu.so` (its soname so: the loader opens it as any other) had the
    name dropped on both paths (the runner's filter, the `\\S+` of runtime_loads), and passed."""
    (tmp_path / "gpu.c").write_text("int gpu(void) { return 1; }\n")
    (tmp_path / "k.c").write_text("int gpu(void);\nint main(void) { return gpu(); }\n")
    lib = ["gcc", "-shared", "-fPIC", "-Wl,-soname,libmy gpu.so", "-o", str(tmp_path / "libmygpu.so")]
    subprocess.run([*lib, str(tmp_path / "gpu.c")], check=True)
    binary = tmp_path / "k"
    subprocess.run(["gcc", "-o", str(binary), str(tmp_path / "k.c"), f"-L{tmp_path}", "-lmygpu"], check=True)
    said = runtime_loads(_said(python, binary, {"PATH": os.environ["PATH"]}))
    assert "it needs libmy?gpu.so" in said, said


@pytest.mark.parametrize("python", [True, False], ids=["runner", "shell"])
def test_an_ordinary_name_from_the_builds_own_folder_is_not_ordinary(tmp_path: Path, python: bool) -> None:
    """`-cudart shared` with `-Wl,-rpath,BUILD_DIR` loads a `libcudart.so.13` the build made, whose
    GPU code no inspect saw: judged by its name alone, it passed. Its folder is said, and an rpath
    to CUDA's own lib folder (an honest `-cudart shared` build) is not."""
    (tmp_path / "rt.c").write_text("int cudaMalloc(void **p, unsigned long n) { return 0; }\n")
    (tmp_path / "k.c").write_text(
        "int cudaMalloc(void **, unsigned long);\nint main(void) { void *p; return cudaMalloc(&p, 1); }\n"
    )
    lib = ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13", "-o", str(tmp_path / "libcudart.so")]
    subprocess.run([*lib, str(tmp_path / "rt.c")], check=True)
    env = {"PATH": os.environ["PATH"]}
    said = {}
    for name, rpath in (("own", str(tmp_path)), ("cuda", "/usr/local/cuda/lib64")):
        link = [f"-L{tmp_path}", "-lcudart", f"-Wl,-rpath,{rpath}"]
        subprocess.run(["gcc", "-o", str(tmp_path / name), str(tmp_path / "k.c"), *link], check=True)
        said[name] = runtime_loads(_said(python, tmp_path / name, env))
    assert f"it loads its libraries from {tmp_path} first" in said["own"], said
    assert said["cuda"] == "", said
