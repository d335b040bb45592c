"""Red-team round 52: inputs that change what a node's compilers build, but not the build key."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, SshNode, query, standin_job, standin_variant, write_farm
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


def login_env(node: SshNode, **env: str) -> None:
    """The node's login environment (sshd's SetEnv) made PATH, HOME and ENV: what an admin's
    /etc/environment, a ~/.bashrc or a module load sets for every login, the farm's included."""
    node.stop()
    lines = node.config.read_text().splitlines()
    base = next(line for line in lines if line.startswith("SetEnv "))
    kept = " ".join(part for part in base.split()[1:] if part.split("=", 1)[0] in ("HOME", "PATH"))
    extra = " ".join(f"{name}={value}" for name, value in env.items())
    node.config.write_text("\n".join(f"SetEnv {kept} {extra}".rstrip() if line == base else line for line in lines))
    node.start()


def verify(node: SshNode, root: Path, variants: dict[str, dict[str, object]], **entry: object) -> dict[str, int]:
    nodes = {"t4": node.farm_entry(root.parent / "work", **entry)}
    farm_file = write_farm(root, nodes, [standin_job("standin", variants)])
    farm = load_farm(farm_file)
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm, None, None), cache_dir=root.parent / "cache")
    finally:
        store.close()
    return dict(summary.outcomes)


def test_a_compiler_variable_changed_in_the_nodes_login_environment_rebuilds(
    fleet: Fleet, tmp_path: Path, runner: str
) -> None:
    """The node's login environment reaches every build as the node's `env:` does: g++ reads
    CPATH (C_INCLUDE_PATH, LIBRARY_PATH, GCC_EXEC_PREFIX, ...), nvcc NVCC_APPEND_FLAGS,
    NVCC_PREPEND_FLAGS and NVCC_CCBIN. Set by the admin (/etc/environment, a module load) or by a
    kernel of the same user (a shell start-up file the login reads), it changes what every build
    makes. The key named only farm.yaml's `env:`: with CPATH moved from a folder whose header says
    MODE_PASS to one whose header says MODE_FAILNUM, the binary built under the first was reused
    and passed, though the build from the same inputs now fails its numbers."""
    node = fleet.add("t4", CARDS["t4"], start=False)
    headers = {}
    for mode in ("PASS", "FAILNUM"):
        folder = tmp_path / f"include-{mode.lower()}"
        folder.mkdir()
        (folder / "farm_mode.h").write_text(f"#define MODE_{mode} 1\n")
        headers[mode] = folder
    build = "g++ -O1 -include farm_mode.h -DMIN_CC=75 -o {binary} {sources}"
    variants = {"p": standin_variant("PASS", MIN75, "MIN_CC=75", build=build)}
    outcomes = []
    for mode in ("PASS", "FAILNUM"):
        login_env(node, CPATH=str(headers[mode]))
        outcomes.append(verify(node, tmp_path / "farm", variants))
    rows = query(tmp_path / "farm" / "results.db", "SELECT build_cached, build_key FROM results ORDER BY run_id")
    assert outcomes == [{"pass": 1}, {"fail": 1}], outcomes
    assert [r["build_cached"] for r in rows] == [0, 0]


def test_both_probes_name_the_logins_compiler_variables_alike(fleet: Fleet, tmp_path: Path) -> None:
    """The shell probe (nodes without python3) and the resident runner's list the login's
    compiler variables alike, a value with spaces and an empty one included, and nvcc's set-up
    alike: a node's key must not change with the runner that probed it."""
    from test_node_runner import both_probes

    node = fleet.add("t4", CARDS["t4"], start=False)
    login_env(node, NVCC_APPEND_FLAGS='"-DA=1 -DB=2"', CPATH='""')
    shell, served = both_probes(node, tmp_path / "work", [])
    assert shell.compilers == served.compilers
    assert f"env NVCC_APPEND_FLAGS {b'-DA=1 -DB=2'.hex()}" in served.compilers.splitlines(), served.compilers
    assert "env CPATH" in served.compilers.splitlines()
    assert any(line.startswith("nvcc-setup ") for line in served.compilers.splitlines()), served.compilers


# the nvcc scripts/setup.sh gave this machine (the image's, else the venv's wheels): never a skip
REAL_NVCC = str(Path(shutil.which("nvcc") or "nvcc").absolute())


def test_the_nodes_nvcc_set_up_anew_under_the_same_version_rebuilds(fleet: Fleet, tmp_path: Path, runner: str) -> None:
    """The node's nvcc a site's wrapper (a module shim, `exec .../nvcc -ccbin ... "$@"`) or one whose
    nvcc.profile beside it says its INCLUDES, LIBRARIES, CUDAFE_FLAGS and PTXAS_FLAGS: rewritten, it
    builds another binary, while `nvcc --version` (in the key) prints what it printed. The key named
    only nvcc's path and that text: the wrapper's flag moved from -DMODE_PASS to -DMODE_FAILNUM,
    the binary built under the first was reused and passed, though a build now fails its numbers."""
    node = fleet.add("t4", CARDS["t4"])
    wrapper = node.node_bin / "nvcc-site"
    build = "{nvcc} -O1 -DMIN_CC=75 -o {binary} {sources}"
    variants = {"p": standin_variant("PASS", MIN75, "MIN_CC=75", build=build)}
    outcomes = []
    for mode in ("PASS", "FAILNUM"):
        wrapper.write_text(f'#!/bin/sh\nexec {REAL_NVCC} -DMODE_{mode} "$@"\n')
        wrapper.chmod(0o755)
        outcomes.append(verify(node, tmp_path / "farm", variants, nvcc=str(wrapper)))
    rows = query(tmp_path / "farm" / "results.db", "SELECT build_cached, build_key FROM results ORDER BY run_id")
    assert outcomes == [{"pass": 1}, {"fail": 1}], outcomes
    assert [r["build_cached"] for r in rows] == [0, 0]
