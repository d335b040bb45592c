"""Red-team round 203: a stop (SIGTERM, as cron's `timeout` sends) while the farm is stuck on a fault.

Under `runner: shell`, a node cut off one way (its packets to the farm dropped) mid-kernel: the stop's
kill could not reach it, and the cell's command waited on its dead connection for its whole budget; the
process was still there 60 s after SIGTERM. A stop now has the connection of every command still waiting
CUT_AFTER (3 s) later closed (stopping.py, ssh_watchdog.py).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from farm_cli import farm, farm_argv, farm_env
from faults import NetnsNode, faults_job, faults_variant, started_netns_node, wait_for
from faults import write_fault_farm as write_farm
from nodes import processes_matching, query


@pytest.fixture
def netns_node(tmp_path: Path) -> Iterator[NetnsNode]:
    with started_netns_node("stop", tmp_path / "node") as node:
        yield node


def _blackhole(node: NetnsNode) -> None:
    done = subprocess.run(
        ["ip", "-n", node.netns, "route", "add", "blackhole", f"{node.host_addr}/32"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout.split()
    kids: dict[int, list[int]] = {}
    for child, parent in zip(out[::2], out[1::2], strict=True):
        kids.setdefault(int(parent), []).append(int(child))
    found, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _stop(root: Path, trigger: Callable[[], object], inject: Callable[[], None], settle: float) -> dict[str, object]:
    """Run `farm verify --all`, inject the fault once `trigger()`, SIGTERM `settle` s later: what followed."""
    process = subprocess.Popen(
        farm_argv("verify", "--all", "--config", str(root / "farm.yaml")),
        cwd=root,
        env=farm_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(trigger, 60, "the trigger")
        inject()
        time.sleep(settle)
        kids = _descendants(process.pid)
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            _, err = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
            return {"took": None, "err": err}
        took = time.monotonic() - sent
        time.sleep(0.5)
        left = [p for p in kids if Path(f"/proc/{p}").exists()]
        left += [p for p, _ in processes_matching(str(root))]
        runs = [tuple(r) for r in query(root / "results.db", "SELECT status, exit_code FROM runs")]
        rows = [(r["variant"], r["outcome"], r["reason"]) for r in query(root / "results.db", "SELECT * FROM results")]
        export = farm("report", "--format", "json", "--config", str(root / "farm.yaml"), cwd=root, timeout=60)
        data = json.loads(export.stdout) if export.stdout.strip().startswith("{") else {}
        return {
            "took": took,
            "code": process.returncode,
            "runs": runs,
            "rows": rows,
            "left": left,
            "export_code": export.returncode,
            "complete": data.get("complete", data.get("run", {}).get("complete")),
            "err": err[-3000:],
        }
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


VARIANTS = {
    "slow": faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=20"),
    "after1": faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=0"),
}


def test_sigterm_while_a_node_is_cut_off_one_way_under_the_shell_runner_stops_promptly(
    netns_node: NetnsNode, tmp_path: Path
) -> None:
    """Before: the farm still running 20 s after SIGTERM (60 s in the probe: the cell's 30 s budget and
    more, on a dead connection). Figure: exit 4 within 12 s, run aborted, both cells not-run, the JSON
    export incomplete and not 0, no process of the farm left."""
    entry = netns_node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=3, runner="shell")
    job = faults_job(VARIANTS, timeout=30, build_timeout=40)
    root = tmp_path / "farm"
    write_farm(root, {"ow": entry}, [job], retries=0, reconnect_window=30.0)
    kernel = re.compile(r"/bin/faults-slow$")
    result = _stop(
        root,
        lambda: any(kernel.search(c) for _, c in processes_matching(str(tmp_path / "work"))),
        lambda: _blackhole(netns_node),
        2,
    )
    assert result["took"] is not None, result
    assert result["took"] < 12, result
    assert result["code"] == 4, result
    assert result["runs"] == [("aborted", 4)], result
    assert {outcome for _, outcome, _ in result["rows"]} == {"not-run"}, result
    assert result["complete"] is False and result["export_code"] not in (0, None), result
    assert result["left"] == [], result


def test_sigterm_while_a_nodes_dial_times_out_stores_the_run_stopped(netns_node: NetnsNode, tmp_path: Path) -> None:
    """Red-team 203's open item (fixed in session 41): the node's replies black-holed from the start, the
    farm dialling it (connect_timeout 8 s) when SIGTERM comes. Before: the run stored `finished`, its
    cells infra-error "cannot connect ... timed out", the JSON export `complete: true`: the stop recorded
    nowhere (a node's failure judged after the stop, perhaps the stop's doing). Figure: exit 4, the run
    aborted, its cells not-run, the export incomplete, no process of the farm left."""
    entry = netns_node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=8)
    root = tmp_path / "farm"
    write_farm(root, {"ow": entry}, [faults_job(VARIANTS, timeout=30)], retries=0, reconnect_window=0.0)
    _blackhole(netns_node)
    result = _stop(root, lambda: True, lambda: None, 2)
    assert result["took"] is not None and result["took"] < 18, result
    assert result["code"] == 4, result
    assert result["runs"] == [("aborted", 4)], result
    assert {outcome for _, outcome, _ in result["rows"]} == {"not-run"}, result
    assert result["complete"] is False and result["export_code"] not in (0, None), result
    assert result["left"] == [], result
