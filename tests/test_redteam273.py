"""Red-team round 273: whom a failed build is blamed on when its disk ran short, and which host
compiler the canary after a failed build tries; real sshd nodes, both node runners, a real tmpfs
as the node's work folder (test_redteam262's fixtures).

Broke (before/after): round 262's build-room watch made any failed build that ran short of room
the node's infra-error, retried, its build-fail hidden, the node's health count charged for it;
a build that fills the disk with its OWN files (a generated source of gigabytes, a -save-temps of
a giant kernel, a `dd` in its command) is the kernel's. The watch now says, beside the lowest
room, the room as the build began and the size of the build's own folder (its $TMPDIR is in it)
at the lowest; where the build's own files were most of the room lost and, without them, the
node had what the farm promises (snapshot.MIN_FREE), the failure is the kernel's build-fail, its
reason saying so. A disk another tenant filled stays infra-error (test_redteam262).

And round 260's canary (the farm's own one-line program, built after a failed build with the build's
compilers) read the build's host compiler only as `-ccbin X`/`--compiler-bindir X` and a `g++` word:
a build choosing it by NVCC_CCBIN, NVCC_APPEND_FLAGS, a variable or `CXX=clang++ make` was canaried
with another compiler, or none. It now reads them from the command's words as config/shell.py lexes
them (never running the command); one it cannot read (`-ccbin $(which clang++)`) is no nvcc canary.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nodes import SshNode
from test_redteam262 import BEGUN, _verify, mounted, node, tenant  # noqa: F401 (fixtures)

from orchestrator.run import canary
from orchestrator.run.stages.room import lowest_room

# fills the build folder's file system with the build's own file, holds it past the samplers'
# interval, removes it, and fails as nvcc would
OWN_FILL = (
    "test -e {sources} -o -e {binary}; dd if=/dev/zero of=generated.cu bs=1M 2>/dev/null; sleep 1; "
    "rm -f generated.cu; echo 'nvcc fatal   : Could not write to file: No space left on device'; exit 1"
)
# the same, its file left in its build folder (the look after it finds the disk still full)
OWN_LEFT = (
    "test -e {sources} -o -e {binary}; dd if=/dev/zero of=generated.cu bs=1M 2>/dev/null; "
    "echo 'nvcc fatal   : Could not write to file: No space left on device'; exit 1"
)
# nvcc's own temporary files (-save-temps' kind), in the build's own $TMPDIR
OWN_TMP = (
    'test -e {sources} -o -e {binary}; dd if=/dev/zero of="$TMPDIR/tmpxft_k.ii" bs=1M 2>/dev/null; sleep 1; '
    "echo 'nvcc fatal   : Could not write to file: No space left on device'; exit 1"
)


@pytest.mark.parametrize("runner", ["shell", "auto"])
@pytest.mark.parametrize("build", [OWN_FILL, OWN_LEFT, OWN_TMP], ids=["removed", "left", "own-tmp"])
def test_a_build_that_fills_the_disk_with_its_own_files_is_its_build_fail(
    node: SshNode,  # noqa: F811
    mounted: Path,  # noqa: F811
    tmp_path: Path,
    runner: str,
    build: str,
) -> None:
    """Before: infra-error "the node ran out of room during the cell (while its build ran, its work
    folder had 0 MiB free ...)", exit 4: a build writing a file as big as the disk (removed after, left
    in its folder, or in its own $TMPDIR) was the node's, retried, its failure never the kernel's.
    Figure: build-fail, exit 1, its reason naming its own files' size and the room left: the farm
    promised 256 MiB and the disk had them as the build began; the build took them itself, as a
    kernel author and a reviewer would read it."""
    row, done = _verify(node, tmp_path / "farm", mounted / "work", build, runner)
    assert row["outcome"] == "build-fail", (row, done.stdout[-3000:])
    assert "its own files" in row["reason"] and "MiB" in row["reason"], row["reason"]
    assert done.returncode == 1, done.stdout[-2000:]


def _line(low: int, start: int, own: int, files: int = 5000) -> str:
    return f"{low} {files} {start} {files} {own} 10"


def test_whose_files_took_the_room() -> None:
    """Figure: the build's own files are blamed only where they were most of the room lost since it
    began and, without them, the disk had the farm's 256 MiB: 300 MiB of its own on a 320 MiB disk is
    the build's; 100 MiB of its own where another tenant took 200 MiB is the node's (the build wrote
    within what the farm promises); 300 MiB of its own where another took 700 MiB is the node's (the
    others took most); a watch that did not measure the folder ("-") blames nobody's files."""
    from orchestrator.run import own_fill

    mib = 1024
    ours = own_fill.own_fill([_line(0, 320 * mib, 300 * mib)])
    assert "its own files" in ours and "300 MiB" in ours, ours
    assert own_fill.own_fill([_line(0, 300 * mib, 100 * mib)]) == ""
    assert own_fill.own_fill([_line(0, 1000 * mib, 300 * mib)]) == ""
    assert own_fill.own_fill(["0 5000 327680 5000 - -"]) == ""
    assert own_fill.own_fill(["0 5000"]) == ""  # an older runner's line: its two fields only
    # out of inodes by its own 20000 files, its room fine
    assert "files" in own_fill.own_fill(["1048576 10 1048576 20010 1000 20000"])
    # the temporary folder on another file system, short, not the build's: the node's
    assert own_fill.own_fill([_line(1024 * mib, 1024 * mib, 0), _line(0, 300 * mib, 0)]) == ""
    assert lowest_room("@@farm build-room 0 5000 327680 5000 307200 12\n") == ["0 5000 327680 5000 307200 12"]


# writes 100 MiB of its own (within what the farm promises) while another tenant fills the rest
MIXED = (
    f"test -e {{sources}} -o -e {{binary}}; touch {BEGUN}; sleep 0.5; dd if=/dev/zero of=own bs=1M count=100 "
    "2>/dev/null; sleep 4; echo 'nvcc fatal   : Could not write to file: No space left on device'; exit 1"
)


@pytest.mark.parametrize("runner", ["shell", "auto"])
def test_a_disk_another_tenant_filled_beside_the_builds_own_files_stays_the_nodes(
    node: SshNode,  # noqa: F811
    mounted: Path,  # noqa: F811
    tmp_path: Path,
    runner: str,
) -> None:
    """Figure (a guard of the fix above): a build that wrote 100 MiB of its own while another tenant
    filled the rest of its disk is infra-error, exit 4: it wrote within the farm's 256 MiB, and the
    others took the most of the room; the kernel is not blamed for the node's tenant."""
    with tenant(mounted):
        row, done = _verify(node, tmp_path / "farm", mounted / "work", MIXED, runner)
    assert row["outcome"] == "infra-error", (row, done.stdout[-3000:])
    assert "while its build ran" in row["reason"], row["reason"]
    assert done.returncode == 4, done.stdout[-2000:]


@pytest.mark.parametrize(
    ("command", "compilers", "args"),
    [
        # nvcc's host compiler from its variable, prefixed, exported, through env, or in its flags' variables
        ("NVCC_CCBIN=clang++ nvcc -o a k.cu", [("nvcc", "nvcc")], ["-ccbin", "clang++"]),
        ("export NVCC_CCBIN=/opt/c/bin/clang++; nvcc -o a k.cu", [("nvcc", "nvcc")], ["-ccbin", "/opt/c/bin/clang++"]),
        ("env NVCC_CCBIN=g++-12 nvcc -o a k.cu", [("nvcc", "nvcc")], ["-ccbin", "g++-12"]),
        ("NVCC_APPEND_FLAGS='-ccbin clang++' nvcc -o a k.cu", [("nvcc", "nvcc")], ["-ccbin", "clang++"]),
        ("NVCC_PREPEND_FLAGS=--compiler-bindir=g++-12 nvcc k.cu", [("nvcc", "nvcc")], ["--compiler-bindir", "g++-12"]),
        # its -ccbin a variable the command set
        (
            'CXX=clang++; nvcc -ccbin "$CXX" -o a k.cu',
            [("nvcc", "nvcc"), ("clang++", "clang++")],
            ["-ccbin", "clang++"],
        ),
        # the spellings round 261 read stay read
        ("nvcc -ccbin=g++-12 -o a k.cu", [("nvcc", "nvcc")], ["-ccbin", "g++-12"]),
        ("nvcc --compiler-bindir /opt/g12/bin/g++ k.cu", [("nvcc", "nvcc")], ["--compiler-bindir", "/opt/g12/bin/g++"]),
        # a host compiler named as the build's C++ compiler, not g++ itself
        ("CXX=clang++ make", [("clang++", "clang++")], []),
        ("make CXX=/usr/bin/clang++-15 -j4", [("clang++-15", "/usr/bin/clang++-15")], []),
        ("g++-12 -O2 -o a k.cpp", [("g++-12", "g++-12")], []),
        ("g++ -o a k.cpp", [("g++", "g++")], []),
        ("make", [], []),
    ],
)
def test_the_canary_builds_with_the_host_compiler_the_build_chose(
    command: str, compilers: list[tuple[str, str]], args: list[str]
) -> None:
    """Before: the canary after a failed build read only `-ccbin X`, `-ccbin=X`, `--compiler-bindir X` and
    a `g++` word: a build choosing its host compiler by NVCC_CCBIN (prefixed, exported, through `env`), by
    NVCC_APPEND_FLAGS/NVCC_PREPEND_FLAGS, by a variable (`-ccbin "$CXX"`, canaried with the literal `$CXX`,
    which fails: every failure of that job the node's infra-error), or a `CXX=clang++ make`, `g++-12`, was
    canaried with the node's default g++ or not at all: a broken clang++ on the node was the kernel's
    build-fail, and a kernel's own error on a node whose default g++ nvcc refuses the node's. Figure: the
    canary builds with the compiler the build chose, read from the command's words as config/shell.py
    lexes them (the command never run)."""
    assert canary.plan(command, "nvcc") == (compilers, args)


@pytest.mark.parametrize(
    "command",
    ["nvcc -ccbin $(which clang++) k.cu", 'NVCC_CCBIN="$HOME/cc" nvcc k.cu', "nvcc -ccbin `cat cc` k.cu"],
)
def test_a_host_compiler_the_farm_cannot_read_is_no_canary(command: str) -> None:
    """Before: `-ccbin $(which clang++)` canaried nvcc with `-ccbin '$(which'` (a failure whatever the node:
    the job's every build-fail the node's infra-error), NVCC_CCBIN="$HOME/cc" with the default g++. Figure:
    where the build's host compiler is an expansion the farm cannot read without running the job's
    command, nvcc is not canaried (the kernel's failure stays its own, as before round 260)."""
    assert canary.plan(command, "nvcc") == ([], [])


def test_a_host_compiler_run_by_its_path_is_canaried_by_it() -> None:
    """Figure: `/usr/bin/g++-12 k.cpp` is canaried with /usr/bin/g++-12, not a g++-12 the PATH finds."""
    assert canary.plan("/usr/bin/g++-12 -o a k.cpp", "nvcc") == ([("g++-12", "/usr/bin/g++-12")], [])


# a clang++ that cannot compile anything (a broken install), first on the node's PATH
BROKEN_CLANG = (
    '#!/bin/sh\necho "clang++: error: unable to execute command: Segmentation fault (core dumped)" >&2\nexit 1\n'
)


@pytest.mark.parametrize(
    "build",
    [
        "NVCC_CCBIN=clang++ {nvcc} -arch=sm_75 -o {binary} {sources}",
        "{nvcc} -arch=sm_75 -ccbin clang++ -o {binary} {sources}",
        "CXX=clang++; $CXX -x c++ -o {binary} {sources}",
    ],
    ids=["NVCC_CCBIN", "ccbin", "CXX"],
)
def test_a_broken_clang_the_build_chose_is_the_nodes(
    node: SshNode,  # noqa: F811
    tmp_path: Path,
    build: str,
) -> None:
    """The node's clang++ is broken (it fails whatever it compiles); the job's build chooses it as nvcc's
    host compiler by NVCC_CCBIN, or runs it as $CXX. Before: NVCC_CCBIN's and $CXX's builds `build-fail`,
    exit 1 (the canary built with the node's sound default g++, or with no compiler at all), the
    node's broken compiler blamed on the kernel. Figure: infra-error naming the canary's failure with
    that compiler, exit 4, as `-ccbin clang++` already was."""
    clang = node.node_bin / "clang++"
    clang.write_text(BROKEN_CLANG)
    clang.chmod(0o755)
    row, done = _verify(node, tmp_path / "farm", tmp_path / "work", build, "auto")
    assert row["outcome"] == "infra-error", (row, done.stdout[-3000:])
    assert "farm's own one-line program" in row["reason"] and "Segmentation fault" in row["reason"], row["reason"]
    assert done.returncode == 4, done.stdout[-2000:]
