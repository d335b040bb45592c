"""Red-team round 207: the night operator's stop (SIGTERM from cron's `timeout`) while a node is cut off.

Round 203 had every command still waiting 3 s into a stop closed (the watchdog's cut), but a cell
under the default (resident) runner waits on its runner's messages, not on a command of its own: the
cut never reached it, and a node cut off one way mid-kernel held SIGTERM for the rest of the kernel's
budget (26 s of 30). A reconnect window's wait slept on through a stop too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import NetnsNode, faults_job, faults_variant, started_netns_node
from faults import write_fault_farm as write_farm
from nodes import processes_matching
from test_redteam203 import _blackhole, _stop


@pytest.fixture
def netns_node(tmp_path: Path) -> Iterator[NetnsNode]:
    with started_netns_node("stop207", tmp_path / "node") as node:
        yield node


VARIANTS = {
    "slow": faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=25"),
    "after1": faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=0"),
}


def test_sigterm_while_a_node_is_cut_off_one_way_under_the_resident_runner_stops_promptly(
    netns_node: NetnsNode, tmp_path: Path
) -> None:
    """Before: the default runner, the node's packets to the farm dropped mid-kernel (timeout 30 s),
    SIGTERM 2 s later: the farm still running 20 s after it (the cell waited on its runner for the rest
    of the kernel's budget, 26 s measured). Figure: exit 4 within 10 s, the run aborted, its cells
    not-run (none pass), the JSON export incomplete, no process of the farm left."""
    entry = netns_node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=3)
    root = tmp_path / "farm"
    write_farm(root, {"ow": entry}, [faults_job(VARIANTS, timeout=30)], retries=0, reconnect_window=30.0)
    kernel = re.compile(r"/bin/faults-slow$")
    result = _stop(
        root,
        lambda: any(kernel.search(c) for _, c in processes_matching(str(tmp_path / "work"))),
        lambda: _blackhole(netns_node),
        2,
    )
    assert result["took"] is not None and result["took"] < 10, result
    assert result["code"] == 4, result
    assert result["runs"] == [("aborted", 4)], result
    assert {outcome for _, outcome, _ in result["rows"]} == {"not-run"}, result
    assert result["complete"] is False and result["export_code"] not in (0, None), result
    assert result["left"] == [], result
