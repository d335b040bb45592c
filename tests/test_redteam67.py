"""Red-team round 67: the tools nvcc runs from its own folder (ptxas, cicc, ...) and cuobjdump,
replaced on the node between the probe and the build or the inspect."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, SshNode, query, standin_job, standin_variant, write_farm
from test_redteam52 import REAL_NVCC
from test_redteam58 import cuobjdump
from test_redteam62 import before_first_build
from test_verdicts import MIN75

from orchestrator.config.farm import load_farm
from orchestrator.plan import plan_cells
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path / "fleet")
    yield fleet
    fleet.stop()


def real_bin() -> Path:
    """The folder of the real nvcc (`_HERE_` in its dry run): /usr/local/bin/nvcc may be a wrapper."""
    import subprocess

    said = subprocess.run([REAL_NVCC, "-dryrun", "-x", "cu", "-E", "/dev/null"], capture_output=True, text=True)
    here = next(line for line in (said.stdout + said.stderr).splitlines() if line.startswith("#$ _HERE_="))
    return Path(here.split("=", 1)[1])


def private_toolkit(root: Path) -> Path:
    """A toolkit of the test's own: nvcc copied (it finds its tools beside its own file), its
    tools links to the real ones, but ptxas: a script that runs the real one, which the test may
    rewrite. The machine's toolkit is never touched."""
    real = real_bin()
    top = root / "cuda"
    (top / "bin").mkdir(parents=True)
    for entry in real.parent.iterdir():
        if entry.name != "bin":
            (top / entry.name).symlink_to(entry)
    for entry in real.iterdir():
        if entry.name in ("nvcc", "nvcc.profile"):
            shutil.copy2(entry, top / "bin" / entry.name)
        elif entry.name != "ptxas":
            (top / "bin" / entry.name).symlink_to(entry)
    ptxas(top / "bin" / "ptxas", real / "ptxas", "")
    return top / "bin" / "nvcc"


def ptxas(path: Path, real: Path, flags: str) -> None:
    path.write_text(f'#!/bin/sh\nexec {real} {flags} "$@"\n')
    path.chmod(0o755)


def farm_run(node: SshNode, root: Path, variants: dict[str, dict[str, object]], source: str, **entry: object) -> dict:
    nodes = {"t4": node.farm_entry(root.parent / "work", **entry)}
    farm_file = write_farm(root, nodes, [standin_job("standin", variants, sources=["kernels/rt67.cu"])])
    (root / "kernels" / "rt67.cu").write_text(source)
    farm = load_farm(farm_file)
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm, None, None), cache_dir=root.parent / "cache")
    finally:
        store.close()
    return dict(summary.outcomes)


STANDIN = (Path(__file__).parent / "standin" / "standin.cpp").read_text()
KERNEL = "\n__global__ void scale(float *out) { out[threadIdx.x] *= 2.0f; }\n"
BUILD = "{nvcc} -O1 -DMODE_PASS -DMIN_CC=75 -arch=sm_75 -o {binary} {sources}"


def test_ptxas_replaced_in_nvccs_folder_between_the_probe_and_the_build_is_no_pass(
    fleet: Fleet, tmp_path: Path, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only nvcc's own file was in the key and checked after the build: ptxas (cicc, nvlink,
    fatbinary, cudafe++), which nvcc runs from its own folder, replaced in place under the same
    `nvcc --version` (an upgrade of one component, a site's wrapper rewritten) built the cell's
    machine code unseen, and the binary passed and was cached under the probed toolkit's key.
    Now the probe records each one's file (found from nvcc's dry run) and the build checks them:
    the node's failure, nothing cached."""
    node = fleet.add("t4", CARDS["t4"])
    nvcc = private_toolkit(tmp_path / "kit")
    tool = nvcc.parent / "ptxas"
    real = real_bin() / "ptxas"
    before_first_build(monkeypatch, lambda: ptxas(tool, real, "-O0"))
    variants = {"p": standin_variant("PASS", MIN75, "MIN_CC=75", build=BUILD)}
    first = farm_run(node, tmp_path / "farm", variants, STANDIN + KERNEL, nvcc=str(nvcc))
    rows = query(tmp_path / "farm" / "results.db", "SELECT outcome, build_cached, reason FROM results")
    assert first == {"infra-error": 1}, (first, [dict(r) for r in rows])
    assert "changed on the node since its probe" in rows[0]["reason"], rows[0]["reason"]
    assert [r["build_cached"] for r in rows] == [0]


def forging_cuobjdump(path: Path, forge: bool) -> None:
    """A site's cuobjdump (a module's wrapper); FORGE: one that says HMMA where the code exits."""
    sed = " | sed 's/EXIT ;/HMMA.1688.F32 R0, R4, R8, R0 ;/'" if forge else ""
    path.write_text(f'#!/bin/sh\n{cuobjdump()} "$@"{sed}\n')
    path.chmod(0o755)


def test_cuobjdump_replaced_between_the_probe_and_the_inspect_is_no_pass(
    fleet: Fleet, tmp_path: Path, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cuobjdump was neither recorded nor checked: the node's cuobjdump replaced after the probe
    (here by one that forges an HMMA) spoke for the binary, and a kernel with no HMMA passed
    `HMMA: 1`. Now the probe records its file and the inspect checks it before and after it ran:
    the node's failure, not the kernel's pass."""
    node = fleet.add("t4", CARDS["t4"])
    tool = node.node_bin / "cuobjdump-site"
    forging_cuobjdump(tool, False)
    # before the build: the cell's inspect may go to the node in the build's own round trip
    before_first_build(monkeypatch, lambda: forging_cuobjdump(tool, True))
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", build=BUILD, inspect="{cuobjdump} -sass {binary}")
    variant["instructions"] = {"HMMA": 1}
    first = farm_run(node, tmp_path / "farm", {"p": variant}, STANDIN + KERNEL, cuobjdump=str(tool))
    rows = query(tmp_path / "farm" / "results.db", "SELECT outcome, reason FROM results")
    assert "pass" not in first and first == {"infra-error": 1}, (first, [r["reason"] for r in rows])
    assert "cuobjdump" in rows[0]["reason"], rows[0]["reason"]


def test_an_unchanged_cuobjdump_still_passes(fleet: Fleet, tmp_path: Path, runner: str) -> None:
    """The check costs no pass: the same site's cuobjdump, unchanged, reads a real HMMA-free dump
    as it did (`EXIT: 1` met)."""
    node = fleet.add("t4", CARDS["t4"])
    tool = node.node_bin / "cuobjdump-site"
    forging_cuobjdump(tool, False)
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", build=BUILD, inspect="{cuobjdump} -sass {binary}")
    variant["instructions"] = {"EXIT": 1}
    first = farm_run(node, tmp_path / "farm", {"p": variant}, STANDIN + KERNEL, cuobjdump=str(tool))
    assert first == {"pass": 1}, first
    assert os.access(tool, os.X_OK)


def test_both_probes_name_nvccs_tools_and_cuobjdump_alike(fleet: Fleet, tmp_path: Path) -> None:
    """The shell probe and the resident runner's list nvcc's tools (from its dry run) and the
    node's cuobjdump by their files alike: a node's key must not change with the runner."""
    from test_node_runner import both_probes

    node = fleet.add("t4", CARDS["t4"])
    forging_cuobjdump(node.node_bin / "cuobjdump", False)
    shell, served = both_probes(node, tmp_path / "work", [])
    assert shell.compilers == served.compilers
    said = served.compilers.splitlines()
    names = [line.split(" ")[1] for line in said if line.startswith("nvcc-tool ")]
    assert names == ["ptxas", "fatbinary", "nvlink", "cudafe++", "cicc"], said
    assert any(line.startswith(f"cuobjdump-file {node.node_bin / 'cuobjdump'} ") for line in said), said
