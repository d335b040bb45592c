"""Red-team round 194: network faults the farm had not met, on real parts (a netns sshd node,
its link shaped by tc).

Checked and found sound (no test here): a node->farm path-MTU black hole ends the node's cells as
infra-error within the resident runner's silence (20 s) per try, never a pass; the same black hole
farm->node ends each try in about 8 s; neither hangs the run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import NetnsNode, faults_job, faults_variant, started_netns_node
from faults import write_fault_farm as write_farm
from nodes import query

from orchestrator.config.farm import load_farm
from orchestrator.plan import plan_cells
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store


@pytest.fixture
def netns_node(tmp_path: Path) -> Iterator[NetnsNode]:
    with started_netns_node("blackhole", tmp_path / "node") as node:
        yield node


def test_a_path_mtu_black_hole_at_start_says_the_stall_not_a_dead_session(
    netns_node: NetnsNode, tmp_path: Path
) -> None:
    """Before: a node whose packets over 1200 bytes never reach the farm (its handshake passes) had
    its cells infra-error "session failed (SSHException: SSH session not active)": the resident
    runner's probe went silent for 20 s, and the shell probe the farm fell back to ran on the
    connection that failure had closed; the stall was unsaid. Figure: 1 node, 2 cells, retries 0:
    both infra-error at the probe in about 20 s, the reason naming the runner's failure and a
    path-MTU black hole; no pass."""
    netns_node.drop_large_from_node(1200)
    variants = {name: faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=0") for name in ("a", "b")}
    entry = netns_node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=3)
    config = write_farm(tmp_path, {"bh": entry}, [faults_job(variants)], retries=0, reconnect_window=0.0)
    farm = load_farm(config)
    store = Store(farm.database_url)
    clock = time.monotonic()
    try:
        summary = run_cells(farm, store, plan_cells(farm, None), cache_dir=tmp_path / "archives", trigger="test")
    finally:
        store.close()
    took = time.monotonic() - clock
    rows = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    assert sorted(r["variant"] for r in rows) == ["a", "b"]
    for row in rows:
        assert (row["outcome"], row["failed_stage"]) == ("infra-error", "probe"), dict(row)
        assert "resident runner's probe failed after" in row["reason"], row["reason"]
        assert "path-MTU black hole" in row["reason"], row["reason"]
    assert took < 40, f"the run took {took:.0f} s"
