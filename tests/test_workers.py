"""Worker processes (orchestrator/run/workers.py): a big fleet's nodes split over
processes, one GIL each, while the parent alone writes the results database.

Over real sshd nodes: a run split over two workers stores what one process
stores; nodes behind one sshd stay in one worker; a worker killed mid-run
leaves its unfinished cells infra-error (exit 70), never lost and never a
verdict; a stop reaches the workers' cells; `processes` is validated.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from farm_cli import farm
from nodes import CARDS, Fleet, processes_carrying, query, standin_job, standin_variant, write_farm

from orchestrator.config.farm import load_farm
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import EXIT_INTERNAL, EXIT_UNEXPECTED, ConfigError
from orchestrator.plan import plan_cells
from orchestrator.run import workers
from orchestrator.run.resident import ResidentRunner
from orchestrator.run.scheduler import FarmRun, run_cells
from orchestrator.run.summary import NullListener, RunSummary
from orchestrator.store.database import Store
from orchestrator.transport import Transport, transport_for

MIN75 = {"min": "7.5"}
MIN80 = {"min": "8.0"}
VARIANTS = {
    "pass": standin_variant("PASS", MIN75, "MIN_CC=75"),
    "failnum": standin_variant("FAILNUM", MIN75, "MIN_CC=75"),
    "ampere": standin_variant("PASS", MIN80, "MIN_CC=80"),
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    fleet = Fleet(tmp_path_factory.mktemp("workers"))
    for name in ("w0", "w1", "w2"):
        # three machines, three cards (a UUID each); w0's second card is w0b's (farm_file)
        fleet.add(name, [CARDS["t4"]] * (2 if name == "w0" else 1))
    yield fleet
    fleet.stop()


def farm_file(fleet: Fleet, root: Path, processes: object, variants: dict | None = None, **keys: object) -> Path:
    """Four farm nodes on three sshds: w0 and w0b share w0's sshd, each with a card of its own
    (one card under two node names runs under one only: run/card_claims.py)."""
    nodes = {name: fleet[name].farm_entry(root / f"work-{name}") for name in ("w0", "w1", "w2")}
    nodes["w0b"] = {**fleet["w0"].farm_entry(root / "work-w0b"), "gpus": [1]}
    nodes["w0"]["gpus"] = [0]
    return write_farm(root, nodes, [standin_job("standin", variants or VARIANTS)], processes=processes, **keys)


class Spy:
    """The worker processes a run starts, and which nodes each was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[workers.Workers] = []
        original = workers.Workers.__init__

        def init(this: workers.Workers, run: FarmRun, groups: list) -> None:
            original(this, run, groups)
            self.made.append(this)

        monkeypatch.setattr(workers.Workers, "__init__", init)


def outcomes(db: Path) -> dict[tuple[str, str], str]:
    return {(r["node"], r["variant"]): r["outcome"] for r in query(db, "SELECT node, variant, outcome FROM results")}


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_split_run_stores_what_one_process_stores(fleet: Fleet, tmp_path: Path, monkeypatch, method: str) -> None:
    """With the workers forked from the farm's process, or from a fork server."""
    monkeypatch.setattr(workers, "start_method", lambda: method)
    spy = Spy(monkeypatch)
    summaries: dict[object, RunSummary] = {}
    for processes in (1, 2):
        farm = load_farm(farm_file(fleet, tmp_path / f"p{processes}", processes))
        store = Store(farm.database_url)
        try:
            summaries[processes] = run_cells(farm, store, plan_cells(farm, None, None), cache_dir=tmp_path / "cache")
        finally:
            store.close()
    (split,) = spy.made  # one process farm starts no worker; two do
    assert split.start_method == method and len(split.processes) == 2
    assert all(p.exitcode == 0 for p in split.processes)
    assert len({p.pid for p in split.processes} | {os.getpid()}) == 3
    # w0 and w0b share an sshd: one worker has them both
    assert sorted(sorted(g) for g in split.groups) == [["w0", "w0b"], ["w1", "w2"]]
    one, two = (outcomes(tmp_path / f"p{n}" / "results.db") for n in (1, 2))
    assert len(two) == 12 and two == one
    assert {o for (_, v), o in two.items() if v == "pass"} == {"pass"}
    assert {o for (_, v), o in two.items() if v == "ampere"} == {"expected-refusal"}
    assert summaries[2].exit_code == summaries[1].exit_code == EXIT_UNEXPECTED
    assert summaries[2].outcomes == summaries[1].outcomes
    assert summaries[2].stage_seconds["probe"] > 0  # the workers' node sums reach the parent's summary
    # each cell's stage seconds once: the parent counts them as each result comes, and a worker's own
    # sums repeated them (the run's "build/run s" line and the fleet bench's stage sums were doubled)
    for n in (1, 2):
        stored = query(tmp_path / f"p{n}" / "results.db", "SELECT stage_seconds FROM results")
        for stage in ("build", "run"):
            want = sum(json.loads(r["stage_seconds"]).get(stage, 0.0) for r in stored)
            assert summaries[n].stage_seconds[stage] == pytest.approx(want, abs=0.01), (n, stage)
    (run,) = query(tmp_path / "p2" / "results.db", "SELECT status, exit_code FROM runs")
    assert (run["status"], run["exit_code"]) == ("finished", EXIT_UNEXPECTED)
    snapshots = query(tmp_path / "p2" / "results.db", "SELECT node, probe_error AS error FROM node_snapshots")
    assert sorted(s["node"] for s in snapshots) == ["w0", "w0b", "w1", "w2"] and not any(s["error"] for s in snapshots)


class KillOnStart(NullListener):
    """Kills the worker process running `node` when its first cell starts."""

    def __init__(self, spy: Spy, node: str) -> None:
        self.spy, self.node, self.killed = spy, node, threading.Event()

    def cell_started(self, cell) -> None:
        if cell.node != self.node or self.killed.is_set():
            return
        (made,) = self.spy.made
        index = next(i for i, group in enumerate(made.groups) if self.node in group)
        time.sleep(1.0)  # the kernel is running (it hangs)
        os.kill(made.processes[index].pid, signal.SIGKILL)
        self.killed.set()


def test_a_worker_killed_mid_run_leaves_its_cells_infra_and_exit_70(fleet: Fleet, tmp_path: Path, monkeypatch) -> None:
    spy = Spy(monkeypatch)
    variants = {
        "hang": standin_variant("HANG", MIN75, "MIN_CC=75", timeout=6),
        "pass": standin_variant("PASS", MIN75, "MIN_CC=75"),
    }
    farm = load_farm(farm_file(fleet, tmp_path, 2, variants))
    cells = plan_cells(farm, None, ["w1", "w2"])  # one node per worker
    listener = KillOnStart(spy, "w1")
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, cells, cache_dir=tmp_path / "cache", listener=listener)
    finally:
        store.close()
    assert listener.killed.is_set()
    assert summary.exit_code == EXIT_INTERNAL
    assert any("worker process" in line for line in summary.internal)
    rows = query(tmp_path / "results.db", "SELECT node, variant, outcome, reason FROM results")
    got = {(r["node"], r["variant"]): r["outcome"] for r in rows}
    assert len(rows) == 4  # every planned cell has exactly one result
    assert got[("w1", "hang")] == "infra-error"
    assert got[("w2", "hang")] == "timeout" and got[("w2", "pass")] == "pass"
    assert got[("w1", "pass")] in ("infra-error", "pass")  # it may have finished before the kill
    reason = next(r["reason"] for r in rows if (r["node"], r["variant"]) == ("w1", "hang"))
    assert "worker process" in reason
    (run,) = query(tmp_path / "results.db", "SELECT status, exit_code FROM runs")
    assert (run["status"], run["exit_code"]) == ("finished", EXIT_INTERNAL)


def assert_nothing_left(token: str) -> None:
    """Nothing of run `token` runs on the nodes. A resident runner whose channel the
    run's end closed exits in its own time (a python3 still starting, on a loaded
    machine, for a moment longer): a few seconds' grace, far below the kernels' hang."""
    deadline = time.monotonic() + 10
    while (left := processes_carrying(f"FARM_RUN={token}")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in left if Path(f"/proc/{pid}").exists()]


def hanging_run(
    fleet: Fleet, root: Path, processes: int, timeout: int
) -> tuple[FarmRun, Store, threading.Thread, list[RunSummary]]:
    """A run of kernels that hang for `timeout` s on every node, started in a thread:
    the run, its store, the thread, and (once it has ended) its summary."""
    variants = {"hang": standin_variant("HANG", MIN75, "MIN_CC=75", timeout=timeout)}
    farm = load_farm(farm_file(fleet, root, processes, variants))
    store = Store(farm.database_url)
    farm_run = FarmRun(farm, store, cache_dir=root / "cache", trigger="test")
    done: list[RunSummary] = []
    thread = threading.Thread(target=lambda: done.append(farm_run.execute(plan_cells(farm, None, None))), daemon=True)
    thread.start()
    return farm_run, store, thread, done


def test_a_stop_reaches_the_workers_cells(fleet: Fleet, tmp_path: Path) -> None:
    farm_run, store, thread, done = hanging_run(fleet, tmp_path, 2, 60)
    try:
        deadline = time.monotonic() + 120
        while len(processes_carrying(f"FARM_RUN={farm_run.token}")) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        running = processes_carrying(f"FARM_RUN={farm_run.token}")
        if len(running) < 4:  # what became of the cells that did not hang (seen once in CI, after ee11502)
            stored = query(tmp_path / "results.db", "SELECT node, outcome, reason FROM results")
            pytest.fail(f"the hanging kernels never all ran: {running}, stored {[tuple(r) for r in stored]}")
        farm_run.stop("SIGTERM")
        thread.join(60)
        assert done, "the run did not end after its stop"
    finally:
        store.close()
    assert_nothing_left(farm_run.token)
    assert set(outcomes(tmp_path / "results.db").values()) == {"not-run"}
    (run,) = query(tmp_path / "results.db", "SELECT status FROM runs")
    assert run["status"] == "aborted"


def test_workers_are_forked_only_where_no_other_thread_could_hold_what_they_need() -> None:
    """Forked from the farm's process (its modules imported: milliseconds, not the fork
    server's import of the farm) while no thread but the SSH watchdog, which a forked
    child resets, runs beside the one starting them; else from the fork server."""
    beside = [t for t in threading.enumerate() if t is not threading.current_thread()]
    if all(t.name in workers.FORK_SAFE_THREADS for t in beside):
        assert workers.start_method() == "fork"
    release = threading.Event()
    other = threading.Thread(target=release.wait, name="holds-a-lock-maybe", daemon=True)
    other.start()
    try:
        assert workers.start_method() == "forkserver"
    finally:
        release.set()
        other.join()


def test_workers_are_forked_after_ssh_used_in_the_same_process(fleet: Fleet, tmp_path: Path) -> None:
    """A closed SSH transport's thread outlives close() by up to its socket's poll: a run
    started just after (the fleet bench after its floor run, a library caller) saw it
    alive and paid the fork server's start (0.5-1.3 s: the bench's N=32 anomaly)."""
    beside = [t for t in threading.enumerate() if t is not threading.current_thread()]
    if not all(t.name in workers.FORK_SAFE_THREADS for t in beside):
        pytest.fail(f"threads left running by earlier tests: {[t.name for t in beside]}")
    for _ in range(3):  # the race the wait closes: once would pass by luck now and then
        with transport_for("w1", NodeSpec(**fleet["w1"].farm_entry(tmp_path / "work"))) as transport:
            assert transport.run("true", timeout=30).ok
        assert workers.start_method() == "fork"


class _ClosedTransport(threading.Thread):
    """A paramiko.Transport as close() leaves it: inactive, its thread still ending."""

    def __init__(self, lingers: float) -> None:
        super().__init__(target=time.sleep, args=(lingers,), daemon=True)
        self.active = False

    def stop_thread(self) -> None:  # what marks a paramiko.Transport (duck-typed there)
        pass


def test_a_closed_transport_is_waited_for_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "CLOSED_TRANSPORT_WAIT", 0.5)
    ending = _ClosedTransport(0.2)
    ending.start()
    assert workers.start_method() == "fork"
    assert not ending.is_alive()
    stuck = _ClosedTransport(5.0)  # one that does not end in time may still hold a lock: not forked
    stuck.start()
    clock = time.monotonic()
    assert workers.start_method() == "forkserver"
    assert time.monotonic() - clock < 2.0
    stuck.join()


def test_split_keeps_each_sshds_nodes_together_and_balances_cells(fleet: Fleet, tmp_path: Path) -> None:
    farm = load_farm(farm_file(fleet, tmp_path, "auto"))
    by_node: dict[str, list] = {}
    for cell in plan_cells(farm, None, None):
        by_node.setdefault(cell.node, []).append(cell)
    assert workers.worker_count(farm, list(by_node)) == 1  # auto: three sshds are no big fleet
    groups = workers.split(farm, by_node, 3)
    assert sorted(sorted(g) for g in groups) == [["w0", "w0b"], ["w1"], ["w2"]]
    assert len(workers.split(farm, by_node, 2)) == 2


def test_auto_counts_the_cpus_the_farm_may_use_not_the_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 sshds: four workers on a machine of 16 cores; none beside the farm's own process where a
    # taskset, cpuset or container leaves it two of them (it started 4 workers on 2 cores)
    nodes = {f"n{i}": SimpleNamespace(jump=None, host="127.0.0.1", port=2200 + i, transport="ssh") for i in range(64)}
    farm = SimpleNamespace(spec=SimpleNamespace(processes="auto"), nodes=nodes)
    monkeypatch.setattr(workers.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert workers.worker_count(farm, list(nodes)) == 4  # type: ignore[arg-type]
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert workers.worker_count(farm, list(nodes)) == 1  # type: ignore[arg-type]
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    assert workers.worker_count(farm, list(nodes)) == 3  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -1, "many", 2.5, True])
def test_processes_must_be_auto_or_a_count(fleet: Fleet, tmp_path: Path, value: object) -> None:
    path = farm_file(fleet, tmp_path, value)
    with pytest.raises(ConfigError) as info:
        load_farm(path)
    said = str(info.value)
    assert "farm.yaml" in said and "processes" in said, said


def test_farm_verify_splits_its_nodes_from_the_command_line(fleet: Fleet, tmp_path: Path) -> None:
    """The CLI (`python -m orchestrator.cli`, whose module a fork server's worker imports
    again as its main) runs a split farm to the end: every cell stored, the usual exit code."""
    path = farm_file(fleet, tmp_path, 2)
    done = farm(
        "verify", "--all", "--config", str(path), "--no-report", extra_env={"XDG_CACHE_HOME": str(tmp_path / "cache")}
    )
    assert done.returncode == EXIT_UNEXPECTED, done.stdout + done.stderr  # failnum is a kernel problem
    got = outcomes(tmp_path / "results.db")
    assert len(got) == 12 and {o for (_, v), o in got.items() if v == "pass"} == {"pass"}
    (run,) = query(tmp_path / "results.db", "SELECT status, exit_code FROM runs")
    assert (run["status"], run["exit_code"]) == ("finished", EXIT_UNEXPECTED)


def test_a_trip_that_reaches_its_node_after_the_stops_kill_is_killed_too(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell past its last look at `stopping` when the stop comes (a worker process
    hears of it in its own time) sends its trip after the stop's kill has swept the
    nodes: the stop sweeps them again, each second, until the run has ended. Here the
    cells' trips are held on their way until the stop has returned; their kernels
    hang for 300 s, and the run still ends within the wait."""
    held, release = threading.Event(), threading.Event()
    original, original_resident = Transport.run_streamed, ResidentRunner.run

    def late(transport: Transport, command: str, **kwargs: object) -> object:
        if "FARM_RUN=" in command:  # a cell's trip, past the cell's last look at `stopping`
            held.set()
            release.wait(60)
        return original(transport, command, **kwargs)

    def late_resident(runner: ResidentRunner, *args: object) -> object:  # the same, to the node's resident runner
        held.set()
        release.wait(60)
        return original_resident(runner, *args)

    monkeypatch.setattr(Transport, "run_streamed", late)
    monkeypatch.setattr(ResidentRunner, "run", late_resident)
    farm_run, store, thread, done = hanging_run(fleet, tmp_path, 1, 300)
    try:
        assert held.wait(120), "no cell came to its trip"
        farm_run.stop("SIGTERM")  # nothing of the run runs on the nodes yet: it kills nothing
        release.set()
        thread.join(90)
        assert done, "the run did not end after its stop"
    finally:
        release.set()
        store.close()
    assert_nothing_left(farm_run.token)
    assert set(outcomes(tmp_path / "results.db").values()) == {"not-run"}


def test_a_result_stored_for_a_worker_that_died_before_saying_so_is_not_stored_again(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's result is stored by the parent, and the worker then says so; one that
    dies in between (seen in CI: five rows for four cells) left that cell to be
    stored again as the worker's loss. The parent counts what it stored itself."""
    farm = load_farm(farm_file(fleet, tmp_path, 2))
    store = Store(farm.database_url)
    try:
        run = FarmRun(farm, store, cache_dir=tmp_path / "cache", trigger="test")
        run.summary = RunSummary(run_id=0)
        cells = plan_cells(farm, None, ["w1"])
        assert len(cells) >= 2
        lost: list[list] = []
        monkeypatch.setattr(run, "_node_failed", lambda name, left, *rest: lost.append(left))
        run.stored_result("w1", cells[0].kernel, cells[0].variant, "Tesla T4")  # stored with its card
        run.node_broke("w1", cells, RuntimeError("the farm's worker process ended"))
    finally:
        store.close()
    assert lost == [cells[1:]]
