"""Red-team round 260: a kernel's compile error told apart from a broken node, at build time, on real
sshd nodes with the real nvcc.

Broke (before/after): a node whose toolchain cannot build anything (its g++'s cc1plus gone or without
its execute bits, which gcc says as "cannot execute 'cc1plus': execvp: No such file or directory"; a
g++ newer than nvcc supports, "#error -- unsupported GNU version!"; nvcc without its ptxas or its
nvcc.profile) failed every build on it, each stored as the kernel's `build-fail`, exit 1: round 244's
look asks only of files the log says were denied, and these say "No such file" or an `#error`. The
log's words are the kernel's to write (a `#warning`, an `#error`, a `#line` file name), so they
decide nothing: the look after a failed build now builds the farm's own one-line program with the
build's compilers (run/canary.py); one that fails too is the node's, infra-error naming its first
error. A kernel's own syntax error, a header of its own it forgot, and one that prints "No space left
on device" and a compiler's own "cannot execute 'cc1plus'" through `#warning`, `#error` and `#line`
stay its `build-fail`, naming the build's error.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from farm_cli import farm
from nodes import CARDS, SshNode, query, running_node

from orchestrator.run import canary

CUDA = Path("/usr/local/cuda-13.0")
GCC_LIBEXEC = Path("/usr/lib/gcc/x86_64-linux-gnu/12")
GOOD = '#include <cstdio>\n__global__ void k() {}\nint main() { std::printf("toy: PASS\\n"); }\n'
BUILD = "{nvcc} -arch=sm_75 -o {binary} {sources}"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SshNode]:
    if not (CUDA / "bin" / "nvcc").exists() or not (GCC_LIBEXEC / "cc1plus").exists():
        pytest.fail("this test builds with the machine's CUDA 13.0 nvcc and its gcc 12")
    yield from running_node("rt260", tmp_path / "node", CARDS["t4"])


def _verify(node: SshNode, root: Path, kernels: dict[str, str], nvcc: str = "/usr/local/bin/nvcc") -> tuple:
    """`farm verify --all` of KERNELS (name -> source, each built by BUILD) on NODE: (rows by kernel, exit)."""
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    (root / "jobs").mkdir(exist_ok=True)
    for name, source in kernels.items():
        (root / "kernels" / f"{name}.cu").write_text(source)
        job = {
            "kernel": name,
            "sources": [f"kernels/{name}.cu"],
            "pass_marker": "toy: PASS",
            "refusal_marker": "needs CC",
            "build_timeout": 200,
            "variants": {"plain": {"build": BUILD, "inspect": "objdump -d {binary}", "cc": {"min": "7.5"}}},
        }
        (root / "jobs" / f"{name}.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    nodes = {"rt260": node.farm_entry(root / "work", nvcc=nvcc)}
    farm_file = {"database": "sqlite:///results.db", "reports": "reports", "jobs": "jobs", "nodes": nodes}
    (root / "farm.yaml").write_text(yaml.safe_dump(farm_file, sort_keys=False))
    done = farm("verify", "--all", "--no-report", "--config", str(root / "farm.yaml"), cwd=root, timeout=600)
    rows = query(root / "results.db", "SELECT kernel, outcome, reason FROM results ORDER BY id")
    return {r["kernel"]: dict(r) for r in rows}, done


def _gcc_of_its_own(node: SshNode, cc1plus_mode: int | None) -> None:
    """The node's gcc and g++ (first on its PATH) a copy of the machine's in a folder of the node's
    own, its libexec the machine's linked file by file, cc1plus a copy of MODE (None: not there)."""
    top = node.root / "gcc"
    libexec = top / "lib" / "gcc" / "x86_64-linux-gnu" / "12"
    libexec.mkdir(parents=True)
    (top / "bin").mkdir()
    for entry in GCC_LIBEXEC.iterdir():
        if entry.name != "cc1plus":
            (libexec / entry.name).symlink_to(entry)
    if cc1plus_mode is not None:
        shutil.copy2(GCC_LIBEXEC / "cc1plus", libexec / "cc1plus")
        (libexec / "cc1plus").chmod(cc1plus_mode)
    for name, real in (("gcc", "/usr/bin/gcc-12"), ("g++", "/usr/bin/g++-12")):
        shutil.copy2(real, top / "bin" / name)
        (node.node_bin / name).symlink_to(top / "bin" / name)


@pytest.mark.parametrize("mode", [None, 0o644], ids=["missing", "not-executable"])
def test_a_g_plus_plus_without_its_cc1plus_is_the_nodes(node: SshNode, tmp_path: Path, mode: int | None) -> None:
    """Before: `build-fail` "gcc: fatal error: cannot execute 'cc1plus': execvp: No such file or
    directory" (gcc says so of a cc1plus without its execute bits too), exit 1. Figure: infra-error
    naming cc1plus, "no verdict on the kernel", exit 4; the sound kernel's too: nothing builds."""
    _gcc_of_its_own(node, mode)
    rows, done = _verify(node, tmp_path / "farm", {"good": GOOD})
    assert rows["good"]["outcome"] == "infra-error", (rows, done.stdout[-3000:])
    reason = rows["good"]["reason"]
    assert "cc1plus" in reason and "farm's own one-line program" in reason, reason
    assert "no verdict on the kernel" in reason, reason
    assert done.returncode == 4, done.stdout[-2000:]


def test_a_g_plus_plus_too_new_for_nvcc_is_the_nodes(node: SshNode, tmp_path: Path) -> None:
    """The node's gcc and g++ say they are gcc 99. Before: `build-fail` ".../host_config.h:137:2: error:
    #error -- unsupported GNU version!", exit 1. Figure: infra-error naming the unsupported version."""
    for name in ("gcc", "g++"):
        (node.node_bin / name).write_text(f'#!/bin/sh\nexec /usr/bin/{name} -U__GNUC__ -D__GNUC__=99 "$@"\n')
        (node.node_bin / name).chmod(0o755)
    rows, done = _verify(node, tmp_path / "farm", {"good": GOOD})
    assert rows["good"]["outcome"] == "infra-error", (rows, done.stdout[-3000:])
    assert "unsupported GNU version" in rows["good"]["reason"], rows["good"]["reason"]


def _toolkit(node: SshNode, without: str, truncated: bool) -> str:
    """A CUDA toolkit of the node's own: the machine's linked piece by piece but WITHOUT (a path under
    it), left out or (TRUNCATED) its first 2000 bytes alone, a broken copy. Returns its nvcc."""
    top = node.root / "cuda"
    for folder in ("bin", "nvvm", "nvvm/bin"):
        (top / folder).mkdir(parents=True, exist_ok=True)
    for entry in [*(CUDA / "bin").iterdir(), *(CUDA / "nvvm").iterdir(), *(CUDA / "nvvm" / "bin").iterdir()]:
        rel = entry.relative_to(CUDA)
        if str(rel) not in (without, "nvvm/bin", "bin/nvcc") and not (top / rel).exists():
            (top / rel).symlink_to(entry)
    for name in ("targets", "include", "lib"):
        if (CUDA / name).exists():
            (top / name).symlink_to(CUDA / name)
    shutil.copy2(CUDA / "bin" / "nvcc", top / "bin" / "nvcc")  # nvcc finds its profile by its own folder
    if truncated:
        (top / without).write_bytes((CUDA / without).read_bytes()[:2000])
        (top / without).chmod(0o755)
    return str(top / "bin" / "nvcc")


@pytest.mark.parametrize(
    ("piece", "truncated"),
    [("bin/ptxas", True), ("bin/fatbinary", True), ("nvvm/bin/cicc", False), ("bin/nvcc.profile", False)],
)
def test_an_nvcc_without_a_piece_of_its_own_is_the_nodes(
    node: SshNode, tmp_path: Path, piece: str, truncated: bool
) -> None:
    """nvcc's ptxas or fatbinary a broken copy, its cicc or nvcc.profile not there (the node's PATH has
    a ptxas and a fatbinary of the machine's, which a missing one of nvcc's falls back on). Before:
    `build-fail` ("sh: 1: cicc: not found", a ptxas killed by SIGSEGV), exit 1. Figure: infra-error,
    "no verdict on the kernel", naming the node's nvcc; exit 4."""
    rows, done = _verify(node, tmp_path / "farm", {"good": GOOD}, nvcc=_toolkit(node, piece, truncated))
    assert rows["good"]["outcome"] == "infra-error", (rows, done.stdout[-3000:])
    reason = rows["good"]["reason"]
    assert "the node's nvcc cannot build even the farm's own" in reason and "no verdict on the kernel" in reason
    assert done.returncode == 4, done.stdout[-2000:]


# the kernel's own errors, two of them dressed in a broken node's words
OWN_ERRORS = {
    "syntax": "int main() { return 0 }\n",
    "header": '#include "its_own.cuh"\nint main() { return 0; }\n',
    "template": 'template <int N> struct A { static_assert(N > 0, "N"); };\nint main() { A<0> a; (void)a; }\n',
    "forged": (
        '#warning "No space left on device"\n'
        "#line 1 \"gcc: fatal error: cannot execute 'cc1plus': execvp: No such file or directory\"\n"
        "#error No space left on device\nint main() {}\n"
    ),
}


def test_a_kernels_own_compile_errors_stay_its_build_fail(node: SshNode, tmp_path: Path) -> None:
    """A syntax error, a header of its own not shipped, a static_assert in a template, and one that
    prints "No space left on device" and "cannot execute 'cc1plus'" (a `#line` file name) on a sound
    node: each its `build-fail` naming its error, exit 1; a sound kernel beside them passes."""
    rows, done = _verify(node, tmp_path / "farm", {**OWN_ERRORS, "good": GOOD})
    assert rows["good"]["outcome"] == "pass", rows["good"]
    for name in OWN_ERRORS:
        assert rows[name]["outcome"] == "build-fail", (name, rows[name])
        assert "error" in rows[name]["reason"] and "farm's own" not in rows[name]["reason"], rows[name]
    assert "its_own.cuh" in rows["header"]["reason"], rows["header"]
    assert done.returncode == 1, done.stdout[-2000:]


def test_the_canarys_lines_name_the_first_error() -> None:
    """Figure: a canary that exited 1 is said with its first error line; one that exited 0 is nothing;
    a g++ build is tried with g++, a `make` with nothing."""
    lines = [
        "1024 5000",
        f"{canary.MARK} nvcc 1",
        f"{canary.MARK}-said nvcc In file included from x.h:1,",
        f"{canary.MARK}-said nvcc gcc: fatal error: cannot execute 'cc1plus': execvp: No such file or directory",
    ]
    said = canary.broken(lines)
    assert "exited 1" in said and "cannot execute 'cc1plus'" in said, said
    assert canary.broken([f"{canary.MARK} nvcc 0"]) == ""
    assert canary.tools("'/opt/cuda/bin/nvcc' -o a k.cu", "/opt/cuda/bin/nvcc") == [("nvcc", "/opt/cuda/bin/nvcc")]
    assert canary.tools("g++ -O2 -o a k.cpp", "/opt/cuda/bin/nvcc") == [("g++", "g++")]
    assert canary.tools("make all", "/opt/cuda/bin/nvcc") == []


def test_the_canary_shell_builds_with_the_machines_nvcc(tmp_path: Path) -> None:
    """Figure: canary_sh run by sh on this machine builds the farm's program (status 0) and leaves no
    folder behind; with a g++ that exits 1 it says that g++'s words."""
    script = canary.canary_sh([("nvcc", "/usr/local/bin/nvcc")], str(tmp_path))
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stdout.splitlines() == [f"{canary.MARK} nvcc 0"], done
    assert list(tmp_path.iterdir()) == []
    fake = tmp_path / "bad-g++"
    fake.write_text("#!/bin/sh\necho 'g++: fatal error: no cc1plus here' >&2\nexit 1\n")
    fake.chmod(0o755)
    done = subprocess.run(["sh", "-c", canary.canary_sh([("g++", str(fake))], str(tmp_path))], capture_output=True)
    assert "no cc1plus here" in canary.broken(done.stdout.decode().splitlines()), done
