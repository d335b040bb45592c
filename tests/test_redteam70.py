"""Red-team round 70: the disassembler and the compilers of one cell of different CUDA releases,
or changed between the build and the inspect.

The build ran the node's nvcc (13.0 here); the inspect counted `instructions:` with the node's
cuobjdump, whatever release it was, and the JIT step compiled the card's PTX with the node's nvcc
(its ptxas) as found at inspect time, checked by nothing. Nodes are real sshd nodes (tests/nodes.py);
nvcc 13.0 and cuobjdump are the real ones, the "older cuobjdump" a stand-in printing what a CUDA
12.0 one prints of code it cannot read."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, SshNode, query, standin_variant
from test_redteam52 import REAL_NVCC
from test_redteam58 import cuobjdump
from test_redteam67 import BUILD, KERNEL, STANDIN, farm_run, private_toolkit, real_bin
from test_verdicts import MIN75


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path / "fleet")
    yield fleet
    fleet.stop()


# what an older cuobjdump does with a newer nvcc's cubin: its headers and no SASS (exit 0), a
# fatal error, or part of the code (here: the one EXIT it could decode)
OLD_DUMPS = {
    "empty": "printf '\\nFatbin elf code:\\n================\\narch = sm_75\\ncode version = [1,8]\\n\\n'; exit 0",
    "error": "echo 'cuobjdump fatal   : Could not read ELF: unsupported version' >&2; exit 255",
    "partial": "printf '\\tcode for sm_75\\n\\t\\tFunction : _Z5scalePf\\n        /*0000*/   EXIT ;\\n'; exit 0",
}


def old_cuobjdump(path: Path, dump: str) -> None:
    """A CUDA 12.0 cuobjdump (a module's older toolkit first on PATH): its version line, DUMP
    for a disassembly, the real one's lists (the lists of a fat binary it still reads)."""
    path.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "cuobjdump: NVIDIA (R) CUDA Object Utility"; '
        'echo "Cuda compilation tools, release 12.0, V12.0.140"; exit 0; fi\n'
        f'case " $* " in *" -sass "*) {dump};; esac\n'
        f'exec {cuobjdump()} "$@"\n'
    )
    path.chmod(0o755)


@pytest.mark.parametrize("dump", sorted(OLD_DUMPS))
def test_a_cuobjdump_older_than_nvcc_is_no_verdict_on_the_kernel(
    fleet: Fleet, tmp_path: Path, runner: str, dump: str
) -> None:
    """The node's cuobjdump of CUDA 12.0 read what nvcc 13.0 built: where it printed nothing or
    failed, the kernel was inspect-fail (its `EXIT: 1` unmet, "the disassembler exit 255"); where
    it printed part of the code, the cell passed on a dump the farm cannot back. Now the probe asks
    cuobjdump's release once per node, and a cell of CUDA code read by one older than the nvcc
    that built it is the node's failure, naming both."""
    node = fleet.add("t4", CARDS["t4"])
    tool = node.node_bin / "cuobjdump-old"
    old_cuobjdump(tool, OLD_DUMPS[dump])
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", build=BUILD, inspect="{cuobjdump} -sass {binary}")
    variant["instructions"] = {"EXIT": 1}
    got = farm_run(node, tmp_path / "farm", {"p": variant}, STANDIN + KERNEL, cuobjdump=str(tool))
    rows = query(tmp_path / "farm" / "results.db", "SELECT outcome, reason FROM results")
    assert got == {"infra-error": 1}, (got, [r["reason"] for r in rows])
    reason = rows[0]["reason"]
    assert "12.0" in reason and "13.0" in reason and "cuobjdump" in reason, reason


def test_a_cuobjdump_as_new_as_nvcc_still_passes(fleet: Fleet, tmp_path: Path, runner: str) -> None:
    """The release check costs no pass: the bundled cuobjdump (13.x, not older than nvcc 13.0),
    by a site's wrapper, reads the real dump and `EXIT: 1` is met."""
    node = fleet.add("t4", CARDS["t4"])
    tool = node.node_bin / "cuobjdump-site"
    tool.write_text(f'#!/bin/sh\nexec {cuobjdump()} "$@"\n')
    tool.chmod(0o755)
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", build=BUILD, inspect="{cuobjdump} -sass {binary}")
    variant["instructions"] = {"EXIT": 1}
    got = farm_run(node, tmp_path / "farm", {"p": variant}, STANDIN + KERNEL, cuobjdump=str(tool))
    assert got == {"pass": 1}, got


def test_both_probes_say_cuobjdumps_release_alike(fleet: Fleet, tmp_path: Path) -> None:
    """The shell probe and the resident runner's say the node's cuobjdump's release alike (one
    `cuobjdump --version` per node, not per cell), and it is no part of the build key."""
    from test_node_runner import both_probes

    from orchestrator.run.stages.build_tools import cuobjdump_release

    node = fleet.add("t4", CARDS["t4"])
    old_cuobjdump(node.node_bin / "cuobjdump", OLD_DUMPS["empty"])
    shell, served = both_probes(node, tmp_path / "work", [])
    assert shell.compilers == served.compilers
    assert "cuobjdump-version 12.0.140" in served.compilers.splitlines(), served.compilers
    assert cuobjdump_release(served) == (12, 0)


# sm_75's mma (HMMA in its SASS): what a replaced ptxas compiles in place of the card's PTX
HMMA_KERNEL = r"""
__global__ void mma(float *d, const unsigned *a, const unsigned *b) {
    float c0 = 0, c1 = 0, c2 = 0, c3 = 0;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3) : "r"(a[0]), "r"(a[1]), "r"(b[0]));
    d[threadIdx.x] = c0 + c1 + c2 + c3;
}
"""
PTX_ONLY = "{nvcc} -O1 -DMODE_PASS -DMIN_CC=75 -gencode arch=compute_75,code=compute_75 -o {binary} {sources}"


def upgrading_cuobjdump(path: Path, ptxas: Path, forged_ptxas: Path) -> None:
    """A site's cuobjdump (the real one) through which the test lands an upgrade of nvcc's ptxas
    at the inspect's first list: after the build and its toolchain check, before the JIT step."""
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = --list-elf ] && [ ! -e {ptxas}.done ]; then '
        f"cp {forged_ptxas} {ptxas}.new && mv {ptxas}.new {ptxas} && touch {ptxas}.done; fi\n"
        f'exec {cuobjdump()} "$@"\n'
    )
    path.chmod(0o755)


def forged_ptxas(path: Path, root: Path) -> None:
    """A ptxas of "another release": it compiles an HMMA kernel's PTX whatever PTX it is given."""
    ptx = root / "hmma.ptx"
    (root / "hmma.cu").write_text(HMMA_KERNEL)
    subprocess.run([REAL_NVCC, "-ptx", "-arch=sm_75", "-o", str(ptx), str(root / "hmma.cu")], check=True)
    path.write_text(
        '#!/bin/sh\nfor a; do shift; case $a in *.ptx) set -- "$@" '
        f'{ptx};; *) set -- "$@" "$a";; esac; done\nexec {real_bin() / "ptxas"} "$@"\n'
    )
    path.chmod(0o755)


def jit_run(node: SshNode, root: Path, nvcc: Path, tool: Path, name: str) -> tuple[dict, list]:
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", build=PTX_ONLY, inspect="{cuobjdump} -sass {binary}")
    variant["instructions"] = {name: 1}
    got = farm_run(node, root, {"p": variant}, STANDIN + KERNEL, nvcc=str(nvcc), cuobjdump=str(tool))
    return got, [dict(r) for r in query(root / "results.db", "SELECT outcome, reason FROM results")]


def test_ptxas_replaced_between_the_build_and_the_jit_step_is_no_pass(
    fleet: Fleet, tmp_path: Path, runner: str
) -> None:
    """A binary of PTX only on a T4: the card JITs it, and the farm counts `instructions:` in the
    SASS of its node's nvcc. nvcc's ptxas replaced after the build's toolchain check (an upgrade
    landing mid-run) compiled other code, and `HMMA: 1` passed on a kernel with none, unsaid. Now
    nvcc's and ptxas's files are checked after the JIT step against the probe's, as cuobjdump's
    are: the node's failure, naming the tool."""
    node = fleet.add("t4", CARDS["t4"])
    nvcc = private_toolkit(tmp_path / "kit")
    forged = tmp_path / "ptxas-forged"
    forged_ptxas(forged, tmp_path)
    tool = node.node_bin / "cuobjdump-site"
    upgrading_cuobjdump(tool, nvcc.parent / "ptxas", forged)
    got, rows = jit_run(node, tmp_path / "farm", nvcc, tool, "HMMA")
    assert (nvcc.parent / "ptxas.done").exists()  # the upgrade landed between the build and the JIT step
    assert got == {"infra-error": 1}, (got, rows)
    assert "ptxas" in rows[0]["reason"] and "JIT" in rows[0]["reason"], rows[0]["reason"]


def test_an_unchanged_nvcc_still_counts_the_jit_step(fleet: Fleet, tmp_path: Path, runner: str) -> None:
    """The check costs no pass: the same private toolkit, unchanged, JITs the PTX and `EXIT: 1`
    is met in the SASS its ptxas made."""
    node = fleet.add("t4", CARDS["t4"])
    nvcc = private_toolkit(tmp_path / "kit")
    tool = node.node_bin / "cuobjdump-site"
    tool.write_text(f'#!/bin/sh\nexec {cuobjdump()} "$@"\n')
    tool.chmod(0o755)
    got, rows = jit_run(node, tmp_path / "farm", nvcc, tool, "EXIT")
    assert got == {"pass": 1}, (got, rows)
