"""Red-team round 201: a one-way partition mid-cell under `runner: shell` (left open by round 199).

The node's packets to the farm dropped while its kernel runs (a route gone on the node's side): the
farm's SSH connection stays open to paramiko (TCP retransmits for some 15 minutes), so the cell's
command timed out after its budget and every later command of the node went out on the same dead
connection and waited out its own whole budget (the next cells' builds, the look after each, each
retry): a run held over 9 minutes, SIGTERM waiting behind it. A command that outlives its budget now
has its connection asked for a keepalive answer; a connection that gives none is closed (the next
command dials anew and meets the partition at once) and the cell says the node stopped answering.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import NetnsNode, faults_job, faults_variant, run_in_background, started_netns_node, wait_for
from faults import write_fault_farm as write_farm
from nodes import processes_matching, query


@pytest.fixture
def netns_node(tmp_path: Path) -> Iterator[NetnsNode]:
    with started_netns_node("oneway", tmp_path / "node") as node:
        yield node


def test_a_node_cut_off_one_way_mid_kernel_under_the_shell_runner_ends_in_bounded_time(
    netns_node: NetnsNode, tmp_path: Path
) -> None:
    """Before: 2 cells (the first's kernel running when the node's route to the farm goes), timeout
    8 s, build_timeout 40 s: the run still going 150 s after the cut (each later command waited out its
    budget on the dead connection). Figure: the run over in under 85 s from the cut, every cell
    infra-error, none pass, the first's reason saying the node stopped answering. (It was still going
    150 s after the cut now and then in CI: a cut before the kernel's start reached the farm left the
    cell's one command on the look's budget, 300 s and more; a silent command's connection is now
    asked after 15 s: red-team 223.)"""
    variants = {
        "slow": faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=6"),
        "after1": faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=0"),
    }
    entry = netns_node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=3, runner="shell")
    job = faults_job(variants, timeout=8, build_timeout=40)
    config = write_farm(tmp_path / "farm", {"ow": entry}, [job], retries=0, reconnect_window=2.0)
    thread, outcome, store = run_in_background(config, tmp_path)
    kernel = re.compile(r"/bin/faults-slow$")
    wait_for(
        lambda: any(kernel.search(c) for _, c in processes_matching(str(tmp_path / "work"))), 60, "the slow kernel"
    )
    cut = time.monotonic()
    netns_node.cut_one_way()
    thread.join(150)
    store.close()
    took = time.monotonic() - cut
    assert not thread.is_alive(), f"the run still going {took:.0f} s after the cut"
    assert "error" not in outcome, outcome
    assert took < 85, took  # the run stage's budget (53 s here), 5 s for the keepalive, a 3 s dial
    rows = {r["variant"]: r for r in query(tmp_path / "farm" / "results.db", "SELECT * FROM results")}
    assert set(rows) == set(variants), rows
    assert {r["outcome"] for r in rows.values()} == {"infra-error"}, {v: r["reason"] for v, r in rows.items()}
    assert "stopped answering" in rows["slow"]["reason"], rows["slow"]["reason"]


def test_a_stops_own_sweeps_keep_their_limits_through_the_cut(ssh_fleet, tmp_path: Path) -> None:
    """Red-team 203 closes the connection of every command still waiting 3 s into a stop (a node cut
    off held the stop for its whole budget), and of every command begun since. Before (as merged):
    the stop's own sweeps, begun after the cut (each second until the run ends: a cell begun as the
    stop came is killed by them), had their connections closed at once: nothing of such a cell was
    killed on a healthy node. Figure: on a healthy node, after the cut's time, a command from a
    thread of the stop's ("stop-sweeps") runs to its end; one from a cell's thread is cut."""
    from orchestrator.config.farm_spec import NodeSpec
    from orchestrator.transport import transport_for
    from orchestrator.transport.ssh_watchdog import WATCHDOG

    spec = NodeSpec(**ssh_fleet["t4"].farm_entry(tmp_path / "work"))
    said: dict[str, object] = {}

    def command(name: str) -> None:
        try:
            with transport_for("t4", spec) as t:
                said[name] = t.run("sleep 1; echo swept", timeout=20).stdout.strip()
        except Exception as err:  # the cut's: the connection closed under the command
            said[name] = err

    WATCHDOG.cut(0.0)
    try:
        threads = [threading.Thread(target=command, args=(n,), name=n) for n in ("stop-sweeps", "cell-worker")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        WATCHDOG.uncut()
    assert said["stop-sweeps"] == "swept", said
    assert isinstance(said["cell-worker"], Exception), said
