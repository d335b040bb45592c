"""Every toolkit the course supports (issue 12, part 5): a node lists several
toolchains, and each (node, toolchain) is its own column of the matrix.

The side-by-side test ships CUDA 13.5 (NVIDIA's nvcc wheels from PyPI, unpacked
by the farm: run/toolchain.py) to a real sshd node without a GPU, beside the
machine's own nvcc 13.0, and builds the course's Hopper GEMM with both: the
header's documented build line fails on both compilers, so the job's known
failure (declared for nvcc >=13.0,<13.1) holds on the 13.0 column and the
13.5 column shows the undeclared build-fail, at a glance.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from nodes import query

from docs import readme_yaml
from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigErrors
from orchestrator.plan import SelectionError, plan_cells
from orchestrator.report.site import render
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store
from orchestrator.transport.local import bundled_cuda_bin

REPO = Path(__file__).resolve().parents[1]
CUDA_13_5 = "13.5.37"  # scripts/setup.sh --test fetches its wheels into the farm's cache


def farm_with(root: Path, node: dict[str, object]) -> Path:
    (root / "jobs").mkdir(parents=True, exist_ok=True)
    (root / "kernels").mkdir(exist_ok=True)
    shutil.copy(REPO / "kernels" / "wgmma_gemm.cu", root / "kernels")
    shutil.copy(REPO / "jobs" / "wgmma_gemm.yaml", root / "jobs")
    (root / "farm.yaml").write_text(yaml.safe_dump({"database": "sqlite:///results.db", "nodes": {"box": node}}))
    return root / "farm.yaml"


def readme_example() -> dict:
    """The README's toolchains example: a node entry."""
    return readme_yaml("Every toolkit the course supports: toolchains")["nodes"]


def test_the_readmes_example_is_two_columns(tmp_path: Path) -> None:
    (_, node), *_ = readme_example().items()
    farm = load_farm(farm_with(tmp_path, node))
    assert list(farm.nodes) == ["box+cuda-13.0", "box+cuda-13.5"]
    assert farm.nodes["box+cuda-13.0"].nvcc == "/usr/local/cuda-13.0/bin/nvcc"
    assert farm.nodes["box+cuda-13.5"].pypi_toolchain == CUDA_13_5 == node["toolchains"]["cuda-13.5"]["pypi"]


def test_each_toolchain_is_a_column(tmp_path: Path) -> None:
    config = farm_with(
        tmp_path, {"transport": "local", "toolchains": {"cuda-13.0": "nvcc", "cuda-13.5": {"pypi": CUDA_13_5}}}
    )
    farm = load_farm(config)
    assert list(farm.nodes) == ["box+cuda-13.0", "box+cuda-13.5"]
    assert farm.nodes["box+cuda-13.0"].nvcc == "nvcc" and farm.nodes["box+cuda-13.0"].pypi_toolchain is None
    assert farm.nodes["box+cuda-13.5"].pypi_toolchain == CUDA_13_5
    # a node is selected whole, or one column of it
    assert {c.node for c in plan_cells(farm, None, ["box"])} == {"box+cuda-13.0", "box+cuda-13.5"}
    assert {c.node for c in plan_cells(farm, None, ["box+cuda-13.5"])} == {"box+cuda-13.5"}
    with pytest.raises(SelectionError, match="no node named boxx"):
        plan_cells(farm, None, ["boxx"])
    # `farm nodes` probes each column; a PyPI one's nvcc is shipped by the run, so it says so
    from click.testing import CliRunner

    from orchestrator.cli import main

    said = CliRunner().invoke(main, ["nodes", "--config", str(config)])
    assert said.exit_code == 0, said.output
    lines = {line.split()[0]: line for line in said.output.splitlines()[1:]}
    assert "13.0.88" in lines["box+cuda-13.0"]
    assert f"{CUDA_13_5} (PyPI, shipped by verify)" in lines["box+cuda-13.5"]


@pytest.mark.parametrize(
    ("node", "key", "expected"),
    [
        ({"nvcc": "nvcc", "toolchains": {"a": "nvcc"}}, "nodes.box", "either `nvcc` or `toolchains`"),
        ({"toolchains": {"a": {"pypi": "13.5"}}}, "nodes.box.toolchains.a", "the full version"),
        ({"toolchains": {"a b": "nvcc"}}, "nodes.box.toolchains", "a name of letters"),
        ({"toolchains": {"a": {"pip": "13.5.37"}}}, "nodes.box.toolchains.a", ""),
        ({"toolchain": "a"}, "nodes.box", "`toolchain` is the farm's own"),
        # a column's name is stored as a node's (64 characters): found at load, not by PostgreSQL mid-run
        ({"toolchains": {"c" * 61: "nvcc"}}, "nodes.box.toolchains." + "c" * 61, "at most 64 characters"),
    ],
)
def test_bad_toolchains_are_named(tmp_path: Path, node: dict[str, object], key: str, expected: str) -> None:
    config = farm_with(tmp_path, {"transport": "local", **node})
    with pytest.raises(ConfigErrors) as err:
        load_farm(config)
    text = str(err.value)
    assert str(config) in text and key in text and expected in text, text


def test_cuda_13_0_and_13_5_side_by_side_over_ssh(ssh_fleet, tmp_path: Path) -> None:
    cuda_bin = bundled_cuda_bin()
    assert cuda_bin is not None, "cuobjdump from PyPI (nvidia-cuda-cuobjdump) is part of the farm's install"
    node = ssh_fleet["nogpu"].farm_entry(tmp_path / "work", build_jobs=2, cuobjdump=str(cuda_bin / "cuobjdump"))
    del node["nvcc"]
    # the README's example, with this machine's nvcc 13.0 where it names /usr/local/cuda-13.0
    (_, documented), *_ = readme_example().items()
    node["toolchains"] = {**documented["toolchains"], "cuda-13.0": "/usr/local/bin/nvcc"}
    config = farm_with(tmp_path, node)
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        first = run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "archives")
        again = run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "archives")
        render(store, tmp_path / "site")
    finally:
        store.close()
    db = tmp_path / "results.db"
    cells = {(r["node"], r["variant"]): r for r in query(db, "SELECT * FROM results WHERE run_id = ?", first.run_id)}
    assert {k: r["outcome"] for k, r in cells.items()} == {
        ("box+cuda-13.0", "documented"): "known-failure",
        ("box+cuda-13.0", "gencode"): "compile-only",
        ("box+cuda-13.5", "documented"): "build-fail",  # the declaration names 13.0 only
        ("box+cuda-13.5", "gencode"): "compile-only",
    }
    documented = bytes(cells[("box+cuda-13.5", "documented")]["build_log"]).decode()
    assert "Instruction 'wgmma.fence' not supported on .target 'sm_90'" in documented
    for column in ("box+cuda-13.0", "box+cuda-13.5"):  # both compilers emit the Hopper instructions
        assert json.loads(cells[(column, "gencode")]["instruction_counts"])["HGMMA"] >= 1
    snaps = {s["node"]: s for s in query(db, "SELECT * FROM node_snapshots WHERE run_id = ?", first.run_id)}
    assert snaps["box+cuda-13.0"]["nvcc_version"] == "13.0.88"
    assert snaps["box+cuda-13.5"]["nvcc_version"] == CUDA_13_5
    assert str(tmp_path / "work" / "bundles") in snaps["box+cuda-13.5"]["nvcc_path"]
    assert snaps["box+cuda-13.5"]["bytes_shipped"] > 50_000_000  # the toolkit went to the node
    # the next run finds it there, intact: nothing shipped, the gencode builds reused
    assert again.bytes_shipped == 0
    rerun = {(r["node"], r["variant"]): r for r in query(db, "SELECT * FROM results WHERE run_id = ?", again.run_id)}
    assert rerun[("box+cuda-13.5", "gencode")]["build_cached"]
    # a kernel (the farm's user) rewrites the shipped nvcc: the next run finds the toolkit
    # altered, ships it again before any build, and says so on the cell
    kit = Path(snaps["box+cuda-13.5"]["nvcc_path"]).parents[3]
    nvcc = kit / "nvidia" / "cu13" / "bin" / "nvcc"
    intact = nvcc.read_bytes()
    nvcc.write_bytes(intact + b"\0")
    store = Store(farm.database_url)
    try:
        third = run_cells(
            farm, store, plan_cells(farm, ["wgmma_gemm:gencode"], ["box+cuda-13.5"]), cache_dir=tmp_path / "archives"
        )
    finally:
        store.close()
    (row,) = query(db, "SELECT * FROM results WHERE run_id = ?", third.run_id)
    assert row["outcome"] == "compile-only", row["reason"]
    stage = json.loads(row["stage_details"])["stage"]["detail"]
    assert "CUDA 13.5.37 from PyPI: the copy on the node was altered" in stage, stage
    assert nvcc.read_bytes() == intact  # the intact one is back
    assert third.bytes_shipped > 50_000_000
    # one column per toolchain in the matrix
    index = (tmp_path / "site" / "index.html").read_text()
    assert "box+cuda-13.0" in index and "box+cuda-13.5" in index


def test_columns_of_one_machine_never_share_a_cells_folder(ssh_fleet, make_farm, tmp_path: Path) -> None:
    """Two columns, one machine, one work folder: their cells of one kernel variant
    run in one farm run at once. Each has a folder of its own (at 8b24c90 they
    shared cells/RUN-KERNEL-VARIANT, and one column's copy of the binary replaced
    the other's: infra-error, or worse, a run of the other column's binary)."""
    from nodes import standin_job, standin_variant

    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", build_jobs=2)
    del node["nvcc"]
    node["toolchains"] = {"a": "/usr/local/bin/nvcc", "b": "/usr/local/bin/nvcc"}
    # the copy into the cell's folder comes while the other column's kernel runs in its own
    variant = standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", run="sleep 1; {binary}")
    config = make_farm(tmp_path, {"t4": node}, [standin_job("standin", {f"v{i}": variant for i in range(3)})])
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        for _ in range(2):  # the second run reuses both columns' builds: the copies come at once
            summary = run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "archives")
            assert dict(summary.outcomes) == {"pass": 6}, [r.verdict.reason for _, r, _ in summary.results]
    finally:
        store.close()
    assert not list((tmp_path / "work" / "cells").rglob("*")), "cells' folders left behind"
