"""Faults injected into real processes: nothing is lost, no wrong verdict appears.

Every fault here is real: sshd processes are killed or SIGSTOPped by pid, a
network link is taken down inside a network namespace, a disk is a 64 KiB
tmpfs, the farm itself is SIGKILLed, kernels hang, ignore SIGTERM, print 100 MB
or bytes that are not UTF-8. For each, the tests assert in the results database
that

- an infrastructure fault is `infra-error` (or `not-run`), never a kernel verdict;
- a kernel's own verdict (fail, timeout) is never retried into something else;
- every planned cell has exactly one stored result, and finished cells are kept;
- the run ends within the timeouts it was given.

Probe drift (a node whose GPU changed since farm.yaml was written) is covered
by tests/test_pipeline_ssh.py::test_probe_drift_judges_the_probed_card.

Each test's docstring states the figure it establishes.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from farm_cli import farm, farm_argv, farm_env
from faults import (
    FAULTS_KERNEL,
    NetnsNode,
    Tmpfs,
    TunedNode,
    descendants,
    faults_job,
    faults_variant,
    netns_works,
    signal_pids,
    sshd_tree,
    wait_for,
)
from faults import write_fault_farm as write_farm
from nodes import CARDS, Fleet, SshNode, own_sleep, processes_matching, query, standin_job, standin_variant

from orchestrator.config.farm import load_farm
from orchestrator.errors import EXIT_INFRA, EXIT_LOCKED, EXIT_OK, EXIT_UNEXPECTED
from orchestrator.plan import plan_cells
from orchestrator.report import site as report
from orchestrator.run import resident, snapshot, stages
from orchestrator.run.commands import CHANNEL_MARGIN, KILL_GRACE, OUTPUT_LIMIT
from orchestrator.run.scheduler import run_cells
from orchestrator.run.summary import RunSummary
from orchestrator.store.database import Store
from orchestrator.transport.ssh_watchdog import WATCHDOG_GRACE

MIN75 = {"min": "7.5"}
EXACT90 = {"exactly": "9.0"}
FAST_RETRIES = {"retries": 2, "retry_backoff": 0.2, "unhealthy_after": 3}


# ------------------------------------------------------------------ helpers


def run_farm(config: Path, selectors: list[str] | None = None) -> tuple[RunSummary, float]:
    """One in-process `farm verify` of the farm at `config`; (summary, seconds)."""
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        clock = time.monotonic()
        cells = plan_cells(farm, selectors)
        summary = run_cells(farm, store, cells, cache_dir=config.parent / "archives", trigger="test")
        return summary, time.monotonic() - clock
    finally:
        store.close()


def cli_env(root: Path) -> dict[str, str]:
    # the archive cache of the farm's own machine, kept inside the test's folder (farm_env puts
    # this checkout first on PYTHONPATH: see tests/farm_cli.py)
    return farm_env(extra_env={"XDG_CACHE_HOME": str(root / "xdg-cache")})


def farm_cli(root: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`farm ARGS` run from the farm folder `root`, its archive cache inside it."""
    return farm(*args, cwd=root, env=cli_env(root), timeout=timeout)


def farm_popen(root: Path, *args: str, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            farm_argv(*args), stdout=out, stderr=subprocess.STDOUT, cwd=root, env=cli_env(root), start_new_session=True
        )


def results(db: Path, run_id: int, node: str | None = None) -> dict[tuple[str, str], dict]:
    """(node, variant) -> result row of one run, asserting one row per cell."""
    sql = "SELECT * FROM results WHERE run_id = ?" + (" AND node = ?" if node else "")
    found: dict[tuple[str, str], dict] = {}
    for row in query(db, sql, run_id, *([node] if node else [])):
        key = (row["node"], row["variant"])
        assert key not in found, f"two results for {key} in run {run_id}"
        found[key] = dict(row)
    return found


def attempts(db: Path, run_id: int, node: str, variant: str | None) -> list[dict]:
    """The attempts table's rows for one cell (variant None: the node's setup)."""
    if variant is None:
        rows = query(db, "SELECT * FROM attempts WHERE run_id = ? AND node = ? AND variant IS NULL", run_id, node)
    else:
        sql = "SELECT * FROM attempts WHERE run_id = ? AND node = ? AND variant = ?"
        rows = query(db, sql, run_id, node, variant)
    return [dict(r) for r in sorted(rows, key=lambda r: r["id"])]


def utc(value: str | datetime) -> datetime:
    """A stored or a fresh timestamp as a naive UTC datetime (SQLite drops the zone)."""
    stamp = datetime.fromisoformat(value) if isinstance(value, str) else value
    return stamp.astimezone(UTC).replace(tzinfo=None) if stamp.tzinfo else stamp


def assert_planned_all_stored(db: Path, run_id: int) -> None:
    planned = {
        (r["kernel"], r["variant"], r["node"])
        for r in query(db, "SELECT * FROM planned_cells WHERE run_id = ?", run_id)
    }
    rows = query(db, "SELECT * FROM results WHERE run_id = ?", run_id)
    stored = [(r["kernel"], r["variant"], r["node"]) for r in rows]
    assert sorted(stored) == sorted(planned), f"run {run_id}: planned {sorted(planned)}, stored {sorted(stored)}"


def kernel_needle(workdir: Path, node: str, variant: str, kernel: str = FAULTS_KERNEL) -> str:
    """A command-line fragment only the cell's binary (its copy in the cell's
    scratch folder, where it runs) and its wrappers carry."""
    return f"{workdir}/cells/"


def kernel_running(workdir: Path, node: str, variant: str, kernel: str = FAULTS_KERNEL) -> list[int]:
    """Pids of the cell's binary itself, running."""
    return [
        pid
        for pid, cmdline in processes_matching(kernel_needle(workdir, node, variant, kernel))
        if " " not in cmdline
        and re.search(
            rf"/cells/\d+-[0-9a-f]+/[^/]+/{kernel}\+{variant}(\+[A-Za-z0-9-]+)?(@\d+)?/bin/{kernel}-{variant}$",
            cmdline,
        )
    ]


@pytest.fixture(scope="module")
def own_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SshNode]]:
    """Nodes this module starts itself (to kill, freeze, cut); stopped at its end."""
    started: list[SshNode] = []
    yield started
    for node in reversed(started):
        node.stop()


def start(own_nodes: list[SshNode], node: SshNode) -> SshNode:
    node.prepare()
    own_nodes.append(node)
    node.start()
    return node


# --------------------------------------------------------- 1. down at start


def test_node_down_at_start(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Fault 1, a node whose sshd is stopped before the run (refused at once).

    Its 2 cells are infra-error at stage probe after 1 + retries = 3 setup
    attempts (recorded in `attempts`), given up within 3 s of the run's start; the
    healthy node's 2 cells keep their verdicts (pass, expected-refusal); exit 4.
    Figure: injected 1 dead node (2 cells); 2/2 infra-error, 0 kernel verdicts on
    it, 2/2 healthy cells as expected, 4/4 planned cells stored; given up in
    about 0.4 s here."""
    down = ssh_fleet["down"]
    assert not down.accepts(), "the stopped node's port must have no sshd"
    nodes = {
        "good": ssh_fleet["t4"].farm_entry(tmp_path / "work-good"),
        "gone": down.farm_entry(tmp_path / "work-gone", connect_timeout=2),
    }
    variants = {
        "pass": standin_variant("PASS", MIN75, "MIN_CC=75"),
        "refuse": standin_variant("PASS", EXACT90, "EXACT_CC=90"),
    }
    config = write_farm(tmp_path, nodes, [standin_job("standin", variants)], **FAST_RETRIES)
    summary, seconds = run_farm(config)
    db = tmp_path / "results.db"
    rows = results(db, summary.run_id)
    assert_planned_all_stored(db, summary.run_id)
    for variant in variants:
        row = rows[("gone", variant)]
        assert (row["outcome"], row["failed_stage"]) == ("infra-error", "probe"), row["reason"]
        assert "cannot connect" in row["reason"] and str(down.port) in row["reason"], row["reason"]
    assert rows[("good", "pass")]["outcome"] == "pass"
    assert rows[("good", "refuse")]["outcome"] == "expected-refusal"
    setup = attempts(db, summary.run_id, "gone", None)
    assert [(a["attempt"], a["status"], a["stage"]) for a in setup] == [
        (1, "infra", "probe"),
        (2, "infra", "probe"),
        (3, "infra", "probe"),
    ]
    (run,) = query(db, "SELECT * FROM runs WHERE id = ?", summary.run_id)
    gave_up = (utc(setup[-1]["at"]) - utc(run["started_at"])).total_seconds()
    assert gave_up < 3, f"a refused node took {gave_up:.1f} s to be given up (backoff 0.2 s, 0.4 s)"
    assert [(a["attempt"], a["status"]) for a in attempts(db, summary.run_id, "good", None)] == [(1, "ok")]
    assert summary.exit_code == EXIT_INFRA
    assert (run["status"], run["exit_code"]) == ("finished", EXIT_INFRA)
    assert seconds < 30
    print(f"down node given up {gave_up:.2f} s after the run began; run {seconds:.1f} s")


# --------------------------------------------------- 2, 3, 4: faults mid-run

SLOW_SLEEP = 2  # the slow cell sleeps this long, then passes
SLOW_TIMEOUT = 4  # its run timeout on the node
MIDRUN_CONNECT = 2  # connect_timeout of the nodes of the mid-run test
MIDRUN_VARIANTS = {
    "slow": faults_variant("SLOWPASS", MIN75, f"SLEEP_S={SLOW_SLEEP}", timeout=SLOW_TIMEOUT),
    "after1": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0"),
    "after2": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0"),
}
# reconnect_window 0: these faults are for good, so give up as soon as the retries are spent
MIDRUN_RETRIES = {"retries": 1, "retry_backoff": 0.2, "unhealthy_after": 2, "reconnect_window": 0.0}
# The longest a command can hang on a silent peer before the farm gives up on it:
# the remote timeout, its KILL grace, the channel margin, the watchdog's grace.
SILENT_BOUND = SLOW_TIMEOUT + KILL_GRACE + CHANNEL_MARGIN + WATCHDOG_GRACE


@dataclass
class MidRun:
    root: Path
    summary: RunSummary | None
    seconds: float
    error: BaseException | None
    injected: dict[str, datetime] = field(default_factory=dict)  # farm node -> when (UTC)
    detail: dict[str, str] = field(default_factory=dict)
    netns_error: str | None = None

    @property
    def db(self) -> Path:
        return self.root / "results.db"

    @property
    def rows(self) -> dict[tuple[str, str], dict]:
        assert self.summary is not None, f"the mid-run farm run failed: {self.error!r}"
        return results(self.db, self.summary.run_id)


@pytest.fixture(scope="module")
def midrun(ssh_fleet: Fleet, own_nodes: list[SshNode], tmp_path_factory: pytest.TempPathFactory) -> Iterator[MidRun]:
    """One farm run of four nodes, three of which fail while their slow cell runs:
    `killed` (its sshd tree SIGKILLed), `frozen` (its sshd tree SIGSTOPped),
    `cut` (in its own network namespace, the link taken down); `good` is fine."""
    root = tmp_path_factory.mktemp("midrun")
    card = CARDS["a100"]
    killed = start(own_nodes, SshNode("fault-killed", root / "node-killed", card))
    frozen = start(own_nodes, SshNode("fault-frozen", root / "node-frozen", card))
    nodes = {
        "good": ssh_fleet["t4"].farm_entry(root / "work-good"),
        "killed": killed.farm_entry(root / "work-killed"),
        "frozen": frozen.farm_entry(root / "work-frozen"),
    }
    cut: NetnsNode | None = None
    netns_error = netns_works()
    if netns_error is None:
        try:
            cut = start(own_nodes, NetnsNode("fault-cut", root / "node-cut", card))
            nodes["cut"] = cut.farm_entry(root / "work-cut")
        except RuntimeError as err:
            netns_error, cut = str(err), None
    for entry in nodes.values():
        entry.update(build_jobs=1, connect_timeout=MIDRUN_CONNECT)
    config = write_farm(root, nodes, [faults_job(MIDRUN_VARIANTS)], **MIDRUN_RETRIES)

    outcome: dict[str, object] = {}

    def farm_thread() -> None:
        try:
            outcome["run"] = run_farm(config)
        except BaseException as err:
            outcome["error"] = err

    run = MidRun(root, None, 0.0, None, netns_error=netns_error)
    frozen_pids: list[int] = []
    faults = {"killed": killed, "frozen": frozen} | ({"cut": cut} if cut else {})
    thread = threading.Thread(target=farm_thread, daemon=True)
    # the frozen and the cut nodes are found by their runners' silence: 8 s of it here (20 s in a run,
    # which this whole run waited out), still past the runner's beat of 3 s
    patch = pytest.MonkeyPatch()
    patch.setattr(resident, "SILENT_LIMIT", 8.0)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while faults and thread.is_alive() and time.monotonic() < deadline:
            for name, node in list(faults.items()):
                if not kernel_running(root / f"work-{name}", name, "slow"):
                    continue
                if name == "killed":
                    reached = signal_pids(sshd_tree(node), signal.SIGKILL)
                    run.detail[name] = f"SIGKILL to {len(reached)} sshd processes"
                elif name == "frozen":
                    frozen_pids = signal_pids(sshd_tree(node), signal.SIGSTOP)
                    run.detail[name] = f"SIGSTOP to {len(frozen_pids)} sshd processes"
                else:
                    cut.cut()  # type: ignore[union-attr]
                    run.detail[name] = f"{cut.node_if} down in {cut.netns}"  # type: ignore[union-attr]
                run.injected[name] = datetime.now(UTC)
                del faults[name]
            time.sleep(0.02)
        thread.join(timeout=SILENT_BOUND + 60)
        patch.undo()  # the module's other tests run with the farm's own silence
        if thread.is_alive():
            rows = query(root / "results.db", "SELECT * FROM results")
            stored = [(r["node"], r["variant"], r["outcome"]) for r in rows]
            raise AssertionError(
                f"the farm run hung past every timeout it has ({run.detail}); stored so far: {stored}; "
                f"its threads:\n{farm_threads()}"
            )
        if "run" in outcome:
            run.summary, run.seconds = outcome["run"]  # type: ignore[misc]
        run.error = outcome.get("error")  # type: ignore[assignment]
        assert not faults, f"never saw the slow cell running on {sorted(faults)}: no fault injected there"
        yield run
    finally:
        patch.undo()
        signal_pids(frozen_pids, signal.SIGCONT)
        for node in (killed, frozen, cut):
            if node is not None:
                node.stop()


def farm_threads() -> str:
    """Where the farm's node and cell threads are, for a hang's message."""
    frames = sys._current_frames()
    return "\n".join(
        f"--- {t.name}\n" + "".join(traceback.format_stack(frames[t.ident])[-6:])
        for t in threading.enumerate()
        if t.ident in frames and (t.name.startswith("node") or "-cell" in t.name)
    )


def node_finished_within(run: MidRun, node: str) -> float:
    """Seconds from the node's fault to its last stored result."""
    ended = max(utc(r["ended_at"]) for (n, _), r in run.rows.items() if n == node)
    return (ended - utc(run.injected[node])).total_seconds()


def assert_unhealthy_rest(run: MidRun, node: str) -> None:
    """The node's cells after the faulted one: infra-error without a try, at once."""
    rows = run.rows
    slow_end = utc(rows[(node, "slow")]["ended_at"])
    for variant in ("after1", "after2"):
        row = rows[(node, variant)]
        assert (row["outcome"], row["failed_stage"]) == ("infra-error", "skipped"), (variant, row["reason"])
        assert "marked unhealthy" in row["reason"], row["reason"]
        tries = attempts(run.db, run.summary.run_id, node, variant)  # type: ignore[union-attr]
        assert [(a["attempt"], a["status"]) for a in tries] == [(1, "skipped")], tries
        lag = (utc(row["ended_at"]) - slow_end).total_seconds()
        assert lag < 3.0, f"{variant}@{node} took {lag:.1f} s after the node was given up"


def assert_faulted_slow_cell(run: MidRun, node: str, first_error: str, retry_error: str) -> list[dict]:
    """The slow cell on a faulted node: infra-error after 1 + retries attempts,
    never a pass (the kernel itself would have passed)."""
    row = run.rows[(node, "slow")]
    assert row["outcome"] == "infra-error", f"slow@{node}: {row['outcome']} ({row['reason']})"
    tries = attempts(run.db, run.summary.run_id, node, "slow")  # type: ignore[union-attr]
    assert [(a["attempt"], a["status"], a["stage"]) for a in tries] == [(1, "infra", "run"), (2, "infra", "connect")], (
        tries
    )
    assert re.search(first_error, tries[0]["error"]), tries[0]["error"]
    assert re.search(retry_error, tries[1]["error"]), tries[1]["error"]
    assert row["reason"] == tries[1]["error"]
    return tries


def test_midrun_healthy_node_and_run_unaffected(midrun: MidRun) -> None:
    """Faults 2-4 together: one run of 4 nodes x 3 cells in which 3 nodes fail
    while their slow cell runs.

    The healthy node's 3 cells pass with one attempt each, every planned cell is
    stored, the run finishes (status finished, exit 4) within the silent-peer
    bound (remote timeout + kill grace + channel margin + watchdog grace) plus
    retries.
    Figure: injected 3 faults into 1 run; 12/12 planned cells stored, 3/3 healthy
    cells pass; run over in about 43 s here (bound 92 s)."""
    assert midrun.error is None, f"the farm run raised: {midrun.error!r}"
    run_id = midrun.summary.run_id  # type: ignore[union-attr]
    rows = midrun.rows
    for variant in MIDRUN_VARIANTS:
        assert rows[("good", variant)]["outcome"] == "pass", rows[("good", variant)]["reason"]
        assert [a["status"] for a in attempts(midrun.db, run_id, "good", variant)] == ["ok"]
    assert_planned_all_stored(midrun.db, run_id)
    (row,) = query(midrun.db, "SELECT * FROM runs WHERE id = ?", run_id)
    assert (row["status"], row["exit_code"]) == ("finished", EXIT_INFRA)
    assert set(o for o in midrun.summary.outcomes) == {"pass", "infra-error"}  # type: ignore[union-attr]
    assert midrun.seconds < SILENT_BOUND + 4 * MIDRUN_CONNECT + 30, f"the run took {midrun.seconds:.0f} s"
    print(f"mid-run faults: run of 12 cells finished in {midrun.seconds:.1f} s")


def test_sshd_killed_mid_run(midrun: MidRun) -> None:
    """Fault 2, the node's sshd and its session processes (3 pids) SIGKILLed
    while the slow cell (2 s, then it would pass) runs.

    That cell is infra-error after 1 + 1 retry (the wrapper's status never came;
    the reconnect was refused), never pass; the node's 2 later cells are
    infra-error without an attempt (node unhealthy), within 3 s of it.
    Figure: injected 1 sshd crash; 3/3 cells infra-error, 0 kernel verdicts,
    node done 0.1 s after the kill here (bound 9 s)."""
    assert "killed" in midrun.injected, midrun.detail
    assert_faulted_slow_cell(
        midrun,
        "killed",
        first_error=r"session failed|session ended|printed no status|no answer|EOF|resident runner ended",
        retry_error=r"cannot connect to 127\.0\.0\.1:\d+",
    )
    assert_unhealthy_rest(midrun, "killed")
    took = node_finished_within(midrun, "killed")
    assert took < 2 * MIDRUN_CONNECT + 5, f"the killed node's cells took {took:.1f} s after the kill"
    print(f"killed: node done {took:.1f} s after the kill ({midrun.detail['killed']})")


def test_network_cut_mid_run(midrun: MidRun) -> None:
    """Fault 3, a node in its own network namespace (veth pair in 10.213.X.0/30)
    loses its link while the slow cell runs: no reset, packets vanish.

    The cell is infra-error after 2 attempts (its runner silent, or the command
    timed out on the farm's side; the reconnect failed), the 2 later cells infra-error at once, the node
    done within the silent-peer bound after the cut.
    Figure: injected 1 link cut; 3/3 cells infra-error, 0 kernel verdicts; node
    done 22 s after the cut here (bound 61 s): the runner's silence (20 s; 8 s in
    this module's run), not the run's deadline (39 s before 2026-12-02)."""
    assert midrun.netns_error is None, (
        f"network namespaces are not usable here ({midrun.netns_error}): this test cuts a real veth link "
        "and needs root and iproute2 (`ip netns`), as CI has"
    )
    assert "cut" in midrun.injected, midrun.detail
    assert_faulted_slow_cell(
        midrun,
        "cut",
        first_error=r"said nothing for \d+ s|still running after|no answer within|printed no status|session ended",
        retry_error=r"cannot connect to 10\.213\.\d+\.2:\d+",
    )
    assert_unhealthy_rest(midrun, "cut")
    took = node_finished_within(midrun, "cut")
    assert took < SILENT_BOUND + MIDRUN_CONNECT + 5, f"the cut node's cells took {took:.1f} s after the cut"
    print(f"cut: node done {took:.1f} s after the cut (bound {SILENT_BOUND + MIDRUN_CONNECT + 5} s)")


def test_host_frozen_mid_run(midrun: MidRun) -> None:
    """Fault 4, the node's sshd and its session processes (3 pids) SIGSTOPped
    while the slow cell runs: a hung host, TCP still acknowledged, nothing answers.

    The cell is infra-error after 2 attempts (command timed out; no banner on the
    reconnect), the 2 later cells infra-error at once, the node done within the
    silent-peer bound after the freeze.
    Figure: injected 1 frozen host; 3/3 cells infra-error, 0 kernel verdicts;
    node done 22 s after the freeze here (bound 61 s): the runner's silence
    (resident.SILENT_LIMIT, 20 s; 8 s in this module's run), not the run's deadline (41 s before)."""
    assert "frozen" in midrun.injected, midrun.detail
    assert_faulted_slow_cell(
        midrun,
        "frozen",
        first_error=r"said nothing for \d+ s|still running after|no answer within|printed no status|session ended",
        retry_error=r"cannot connect to 127\.0\.0\.1:\d+ .*(banner|session|timed out|Timeout)",
    )
    assert_unhealthy_rest(midrun, "frozen")
    took = node_finished_within(midrun, "frozen")
    assert took < SILENT_BOUND + MIDRUN_CONNECT + 5, f"the frozen node's cells took {took:.1f} s after the freeze"
    print(f"frozen: node done {took:.1f} s after the freeze ({midrun.detail['frozen']})")


def test_frozen_host_at_start_keeps_quiet_output_quiet(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Fault 4, the fleet's `frozen` node (SIGSTOPped before the run: TCP
    accepts, no banner ever comes) under `farm verify --quiet`, as cron runs it.

    Its cell is infra-error at probe after 2 setup attempts of at most
    connect_timeout (1 s) each, exit 4, and the output is the node's cause,
    once (issue 10, case 7: the cron mail must say why), the line naming its rerun
    (review 264) and the verdict line, with nothing on stderr.
    Figure: injected 1 frozen host; 1/1 cell infra-error in about 3 s; FAILS
    today: paramiko's banner traceback (~20 lines) reaches stderr."""
    config = write_farm(
        tmp_path,
        {"frozen": ssh_fleet["frozen"].farm_entry(tmp_path / "w", connect_timeout=1)},
        [standin_job("standin", {"pass": standin_variant("PASS", MIN75, "MIN_CC=75")})],
        retries=1,
        retry_backoff=0.2,
    )
    clock = time.monotonic()
    done = farm_cli(tmp_path, "verify", "--all", "--quiet", "--no-report", "--config", str(config))
    seconds = time.monotonic() - clock
    assert done.returncode == EXIT_INFRA, done.stdout + done.stderr
    db = tmp_path / "results.db"
    row = results(db, 1)[("frozen", "pass")]
    assert (row["outcome"], row["failed_stage"]) == ("infra-error", "probe"), row["reason"]
    assert "cannot connect" in row["reason"], row["reason"]
    tries = attempts(db, 1, "frozen", None)
    assert [(a["attempt"], a["status"], a["stage"]) for a in tries] == [(1, "infra", "probe"), (2, "infra", "probe")]
    assert seconds < 15, f"farm verify took {seconds:.1f} s on a frozen node with connect_timeout 1"
    verdict = (
        "run 1: 0 as expected, 0 not, 1 infra; exit 4 (every verdict as expected, but some cells could not run (infra))"
    )
    lines = done.stdout.splitlines()
    assert lines[-1] == verdict and len(lines) == 3, done.stdout
    # the node and the command that reruns just its cell, before the verdict (review 264)
    assert lines[-2].startswith("run 1: 1 cell could not run on node frozen (1 infra-error;"), done.stdout
    assert lines[-2].endswith(f"to rerun just them: farm verify --all --node frozen --config {config}"), done.stdout
    assert lines[0].endswith(f"node frozen: unreachable or unusable: {row['reason']}"), done.stdout
    assert done.stderr == "", (
        "BUG in orchestrator/transport/ssh.py: paramiko's transport thread logs 'Exception (client): Error "
        "reading SSH protocol banner' and its traceback through the `paramiko` logger, which has no handler, "
        "so Python's last-resort handler prints them on stderr and `--quiet` (cron mail) is not quiet. "
        f"stderr was:\n{done.stderr[:1500]}"
    )


# ----------------------------------------------- 5. a kernel that never ends

STUBBORN_TIMEOUT = 2


@pytest.mark.usefixtures("runner")  # with either node runner
def test_kernel_that_never_ends_is_killed_on_the_node(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Fault 5, a kernel that ignores SIGTERM and forks a child that ignores it
    too, with a 2 s run timeout.

    Outcome timeout at its limit (a kernel verdict, 1 attempt, never retried), its
    first output kept, and no process of it left on the node within the 5 s KILL
    grace.
    Figure: injected 1 endless kernel (2 processes); verdict timeout after 2 s;
    FAILS today: both processes outlive the run (see the assertion message)."""
    workdir = tmp_path / "work-t4"
    variants = {"stubborn": faults_variant("STUBBORN", MIN75, timeout=STUBBORN_TIMEOUT)}
    nodes = {"t4": ssh_fleet["t4"].farm_entry(workdir)}
    config = write_farm(tmp_path, nodes, [faults_job(variants)], **FAST_RETRIES)
    summary, _ = run_farm(config)
    db = tmp_path / "results.db"
    row = results(db, summary.run_id)[("t4", "stubborn")]
    assert (row["outcome"], row["failed_stage"]) == ("timeout", "run"), row["reason"]
    assert row["exit_code"] in (124, 137), row["exit_code"]
    assert bytes(row["stdout"]) == b"standin: ignoring SIGTERM\n"
    run_seconds = json.loads(row["stage_seconds"])["run"]
    assert STUBBORN_TIMEOUT <= run_seconds < STUBBORN_TIMEOUT + KILL_GRACE + 5, run_seconds
    assert [a["status"] for a in attempts(db, summary.run_id, "t4", "stubborn")] == ["ok"]
    needle = kernel_needle(workdir, "t4", "stubborn")
    deadline = time.monotonic() + KILL_GRACE + 2
    while (left := processes_matching(needle)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid, _ in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, (
        "BUG in orchestrator/run/stages/run.py RunStage._run: `timeout -k 5 N sh -c CMD` sends TERM to its "
        "child `sh` (and the group); sh dies, so timeout exits 124 at once and its KILL after the grace "
        "never comes: a kernel that ignores SIGTERM outlives its timeout on the node. "
        f"Left running {KILL_GRACE + 2} s after the run: {left}"
    )
    assert summary.exit_code == EXIT_UNEXPECTED


# ----------------------------------------------------- kernel verdicts stay


def test_failing_kernel_is_never_retried(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """A kernel that fails numerically, and one that crashes, on a farm
    allowing 2 infra retries: each is `fail` after exactly 1 attempt (a verdict
    is evidence, never retried into a pass).
    Figure: 2 failing kernels; 2/2 fail, 1 attempt each, 0 retries."""
    variants = {
        "failnum": standin_variant("FAILNUM", MIN75, "MIN_CC=75"),
        "crash": standin_variant("CRASH", MIN75, "MIN_CC=75"),
    }
    config = write_farm(
        tmp_path, {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "w")}, [standin_job("standin", variants)], retries=2
    )
    summary, _ = run_farm(config)
    db = tmp_path / "results.db"
    rows = results(db, summary.run_id)
    for variant in variants:
        assert rows[("t4", variant)]["outcome"] == "fail", rows[("t4", variant)]["reason"]
        tries = attempts(db, summary.run_id, "t4", variant)
        assert [(a["attempt"], a["status"]) for a in tries] == [(1, "ok")], tries
    assert b"mismatch at element 17" in bytes(rows[("t4", "failnum")]["stderr"])
    assert summary.exit_code == EXIT_UNEXPECTED


# ------------------------------------------------------ 6. 100 MB of output

FLOOD_MIB = 100
OUTPUT_CAP = 1 << 20
RSS_LIMIT_MIB = 300

PEAK_RSS = """\
import resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
print("maxrss_kib", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)
"""


@pytest.mark.usefixtures("runner")  # with either node runner
def test_kernel_printing_100_mb(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Fault 6, a kernel printing 100 MiB on stdout, run by `farm verify` in a
    subprocess.

    Its pass marker is its last line, after 100 MiB (issue 9, case 1: judged
    `fail` when markers were searched in the kept prefix only): the cell
    passes. Stored: the first and last output_cap / 2 bytes with one elision
    line, the full size and the whole stream's sha256 beside them; the next
    cell passes too, the farm's peak RSS stays under 300 MiB, and the 100 MiB
    file does not stay on the node.
    Figure: 104,857,614 bytes printed; 1,048,576 kept; 2/2 cells pass."""
    workdir = tmp_path / "work-t4"
    variants = {
        "flood": faults_variant("FLOOD", MIN75, f"FLOOD_MIB={FLOOD_MIB}"),
        "after": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0"),
    }
    nodes = {"t4": ssh_fleet["t4"].farm_entry(workdir, build_jobs=1)}
    config = write_farm(tmp_path, nodes, [faults_job(variants)], output_cap=OUTPUT_CAP)
    args = ["verify", "--all", "--config", str(config), "--no-report"]
    done = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, *farm_argv(*args)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=cli_env(tmp_path),
        timeout=180,
        check=False,
    )
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    peak_mib = int(re.search(r"maxrss_kib (\d+)", done.stdout).group(1)) / 1024
    rows = results(tmp_path / "results.db", 1)
    flood = rows[("t4", "flood")]
    full = len(b"standin: PASS\n") + FLOOD_MIB * (1 << 20)
    assert flood["outcome"] == "pass", flood["reason"]
    line = b"x" * 63 + b"\n"
    whole = line * (FLOOD_MIB * (1 << 20) // 64) + b"standin: PASS\n"
    assert (flood["stdout_size"], flood["stdout_sha256"]) == (full, hashlib.sha256(whole).hexdigest())
    half = OUTPUT_CAP // 2
    assert json.loads(flood["output_cuts"]) == {"stdout": [half, full - half]}
    kept = bytes(flood["stdout"])
    assert kept.startswith(whole[:half]) and kept.endswith(whole[-half:])
    assert b"bytes left out here" in kept[half : len(kept) - half]
    assert json.loads(flood["markers"])["pass"] == FLOOD_MIB * (1 << 20) // 64 + 1
    assert bytes(flood["stderr"]) == b"standin: flooded stdout\n"
    assert rows[("t4", "after")]["outcome"] == "pass"
    assert peak_mib < RSS_LIMIT_MIB, f"the farm's peak RSS was {peak_mib:.0f} MiB for a {FLOOD_MIB} MiB output"
    left = sum(p.stat().st_size for p in workdir.rglob("*") if p.is_file())
    assert left < 10 << 20, f"{left} bytes left in the node's work folder"
    print(f"farm peak RSS {peak_mib:.0f} MiB")


# ------------------------------------------------- 7. output that is not UTF-8

EUROS = 200_000
BADUTF8_STDOUT = b"standin: PASS\n" + "€".encode() * EUROS + b"\n\x80|\xff\xfe|\xe2\x82\n"
BADUTF8_STDERR = b"stderr \xe2\x82\xac \xc3\x28 end\n"


@pytest.mark.usefixtures("runner")  # with either node runner
def test_output_not_utf8_is_stored_byte_exact(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Fault 7, 200,000 x U+20AC (600,000 bytes) written 7 bytes at a time, so
    every character is split across writes (and the file's reads split them
    again), then 4 invalid UTF-8 sequences.

    stdout and stderr are stored byte-exact; the cell page shows the 200,000
    euro signs, exactly 4 U+FFFD on stdout (1 on stderr) and otherwise exactly the
    bytes decoded.
    Figure: 600,024 bytes of stdout, 0 bytes altered in the store; 4/4 invalid
    sequences shown as U+FFFD, 0 other characters changed on the page."""
    variants = {"badutf8": faults_variant("BADUTF8", MIN75)}
    config = write_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "w")}, [faults_job(variants)])
    summary, _ = run_farm(config)
    row = results(tmp_path / "results.db", summary.run_id)[("t4", "badutf8")]
    assert row["outcome"] == "pass", row["reason"]
    assert bytes(row["stdout"]) == BADUTF8_STDOUT
    assert row["stdout_size"] == len(BADUTF8_STDOUT)
    assert bytes(row["stderr"]) == BADUTF8_STDERR
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        report.render(store, tmp_path / "reports", summary.run_id, farm=farm)
    finally:
        store.close()
    page = (tmp_path / "reports" / "cells" / f"{row['id']}.html").read_text(encoding="utf-8")
    shown = {
        name: html.unescape(re.search(rf'<pre id="{name}">(.*?)</pre>', page, re.DOTALL).group(1))
        for name in ("stdout", "stderr")
    }
    assert shown["stdout"] == BADUTF8_STDOUT.decode("utf-8", "replace")
    assert shown["stdout"].count("€") == EUROS
    assert shown["stdout"].count("\ufffd") == 4
    assert shown["stdout"].endswith("\n\ufffd|\ufffd\ufffd|\ufffd\n")
    assert shown["stderr"] == "stderr € \ufffd( end\n"


# ------------------------------------------------ 8. the farm SIGKILLed mid-run

HANG_TIMEOUT = 3


def test_farm_killed_mid_run(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Fault 8, `farm verify` SIGKILLed while its second of 3 cells hangs.

    The next `farm verify` says run 1 "was interrupted", marks it aborted and
    records its 2 unfinished cells as not-run; the finished cell is kept as it
    was stored; the hung kernel is gone from the node within its remote timeout
    (3 s + 5 s grace) of the kill.
    Figure: injected 1 SIGKILL; 1/1 finished cell kept, 2/2 unfinished recorded
    not-run, 3/3 planned cells accounted for; kernel gone 3.0 s after the kill."""
    workdir = tmp_path / "work-t4"
    variants = {
        "quick": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0"),
        "hang": faults_variant("SLOWPASS", MIN75, "SLEEP_S=3600", timeout=HANG_TIMEOUT),
        "after": faults_variant("SLOWPASS", MIN75, "SLEEP_S=1"),
    }
    nodes = {"t4": ssh_fleet["t4"].farm_entry(workdir, build_jobs=1)}
    config = write_farm(tmp_path, nodes, [faults_job(variants)])
    db = tmp_path / "results.db"
    farm = farm_popen(tmp_path, "verify", "--all", "--config", str(config), "--no-report", log=tmp_path / "first.log")
    try:
        needle = kernel_needle(workdir, "t4", "hang")
        wait_for(lambda: kernel_running(workdir, "t4", "hang") or farm.poll() is not None, 60, "the hang to start")
        assert farm.poll() is None, (tmp_path / "first.log").read_text()
        (quick_before,) = query(db, "SELECT * FROM results WHERE variant = 'quick'")
        farm.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        assert farm.wait(timeout=10) == -signal.SIGKILL
    finally:
        if farm.poll() is None:
            farm.kill()
            farm.wait()
    (run,) = query(db, "SELECT * FROM runs")
    assert (run["status"], run["ended_at"]) == ("running", None), "SIGKILL leaves no chance to write anything"

    gone = wait_for(lambda: not processes_matching(needle), HANG_TIMEOUT + KILL_GRACE + 3, "the kernel to be killed")
    assert gone
    left_after = time.monotonic() - killed_at

    again = farm_cli(tmp_path, "verify", f"{FAULTS_KERNEL}:quick", "--config", str(config), "--no-report")
    assert again.returncode == EXIT_OK, again.stdout + again.stderr
    assert (
        "run 1 was interrupted (the farm was stopped): marked aborted, 2 unfinished cells recorded as not-run"
        in again.stdout
    ), again.stdout
    runs = {r["id"]: dict(r) for r in query(db, "SELECT * FROM runs")}
    assert runs[1]["status"] == "aborted" and runs[1]["ended_at"] is not None
    assert runs[2]["status"] == "finished"
    rows = results(db, 1)
    assert {v: r["outcome"] for (_, v), r in rows.items()} == {"quick": "pass", "hang": "not-run", "after": "not-run"}
    assert dict(quick_before) == rows[("t4", "quick")], "the finished cell is kept as it was stored"
    assert_planned_all_stored(db, 1)
    print(f"kernel gone {left_after:.1f} s after the farm was killed")


# ------------------------------------------------- 9. two overlapping runs

LOCK_SLEEP = 15  # the two later `farm` starts must fit inside it on a loaded 2-core machine (one did not at load 15)


def test_overlapping_runs_take_turns(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Fault 9, three `farm verify` on one database at once.

    The second (--wait 0) exits 6 naming the first's pid and writes nothing; the
    third (--wait 120) waits and then runs; the runs table holds 2 runs that
    never overlap.
    Figure: 3 overlapping runs; 1 refused (exit 6), 1 queued, 0 overlapping
    writers."""
    workdir = tmp_path / "work-t4"
    variants = {
        "slow": faults_variant("SLOWPASS", MIN75, f"SLEEP_S={LOCK_SLEEP}", timeout=LOCK_SLEEP + 10),
        "quick": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0"),
    }
    config = write_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(workdir)}, [faults_job(variants)])
    db = tmp_path / "results.db"
    first = farm_popen(tmp_path, "verify", "--all", "--config", str(config), "--no-report", log=tmp_path / "a.log")
    third: subprocess.Popen | None = None
    try:
        wait_for(lambda: kernel_running(workdir, "t4", "slow") or first.poll() is not None, 60, "the slow kernel")
        assert first.poll() is None, (tmp_path / "a.log").read_text()
        quick = f"{FAULTS_KERNEL}:quick"
        third = farm_popen(
            tmp_path, "verify", quick, "--config", str(config), "--no-report", "--wait", "120", log=tmp_path / "c.log"
        )
        second = farm_cli(tmp_path, "verify", quick, "--config", str(config), "--no-report", "--wait", "0")
        assert first.poll() is None, "the first run must still hold the lock when the second is refused"
        assert second.returncode == EXIT_LOCKED, second.stdout + second.stderr
        assert f"another farm run holds {db}.lock (pid {first.pid} on " in second.stderr, second.stderr
        assert len(query(db, "SELECT * FROM runs")) == 1, "the refused run wrote nothing"
        assert first.wait(timeout=60) == EXIT_OK, (tmp_path / "a.log").read_text()
        assert third.wait(timeout=120) == EXIT_OK, (tmp_path / "c.log").read_text()
    finally:
        for proc in (first, third):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    runs = [dict(r) for r in query(db, "SELECT * FROM runs ORDER BY id")]
    assert [(r["status"], r["exit_code"]) for r in runs] == [("finished", 0), ("finished", 0)]
    assert utc(runs[1]["started_at"]) >= utc(runs[0]["ended_at"]), "two writers at once"
    assert "was interrupted" not in (tmp_path / "c.log").read_text()
    assert results(db, 2)[("t4", "quick")]["outcome"] == "pass"


# ---------------------------------------- 10. 64 nodes behind one sshd at once

STORM_NODES = 64
STORM_MAXSTARTUPS = "10:30:60"


def test_64_nodes_behind_one_sshd(own_nodes: list[SshNode], ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Fault 10, 64 farm nodes on one sshd whose MaxStartups is 10:30:60 (it
    drops unauthenticated connections beyond 10), all starting at once, one
    compile-only cell each.

    The farm's handshake bound per sshd (max_connections, default 8) and its retries
    (default 2) absorb the drops: 64 of 64 cells as expected, none infra-error.
    Figure: 13-19 handshakes dropped by sshd per run here, each absorbed by one
    retry; 64/64 cells compile-only, 0 infra-error (the run takes 55-75 s on this
    2-core machine; most of it is the sandbox's ~/.bashrc run by every command)."""
    options = {"MaxStartups": STORM_MAXSTARTUPS, "LogLevel": "VERBOSE"}  # VERBOSE: every drop is logged
    storm = start(own_nodes, TunedNode("storm", tmp_path / "node", None, options))
    try:
        _storm(storm, tmp_path)
    finally:
        storm.stop()


def _storm(storm: TunedNode, tmp_path: Path) -> None:
    effective = subprocess.run(["/usr/sbin/sshd", "-T", "-f", str(storm.config)], capture_output=True, text=True)
    assert f"maxstartups {STORM_MAXSTARTUPS}" in effective.stdout, effective.stdout + effective.stderr
    # a shell script for a kernel: the test is about connections, not compilers
    script = "test -f {sources} && printf '#!/bin/sh\\necho \"standin: PASS\"\\n' > {binary} && chmod +x {binary}"
    variants = {"tiny": {"build": script, "inspect": "cat {binary}", "instructions": {}, "cc": MIN75}}
    nodes = {f"n{i:02d}": storm.farm_entry(tmp_path / f"work-{i:02d}", build_jobs=1) for i in range(STORM_NODES)}
    config = write_farm(tmp_path, nodes, [standin_job("tiny", variants)])
    assert "max_connections" not in config.read_text(), "the farm's default bound is what is tested"
    summary, seconds = run_farm(config)
    assert seconds < 240, f"64 nodes took {seconds:.0f} s"
    db = tmp_path / "results.db"
    rows = results(db, summary.run_id)
    bad = {key: (r["outcome"], r["reason"]) for key, r in rows.items() if r["outcome"] != "compile-only"}
    assert not bad, f"{len(bad)} of {STORM_NODES} cells not as expected: {dict(list(bad.items())[:5])}"
    assert len(rows) == STORM_NODES
    assert summary.exit_code == EXIT_OK
    (retried,) = query(db, "SELECT COUNT(*) AS n FROM attempts WHERE run_id = ? AND status = 'infra'", summary.run_id)
    drops = storm.log.read_text(errors="replace").count("past MaxStartups")
    print(f"{STORM_NODES} nodes in {seconds:.1f} s; sshd dropped {drops} handshakes; {retried['n']} infra retries")
    # every handshake sshd dropped is an attempt the farm recorded and retried (none vanished)
    assert retried["n"] >= drops, f"sshd dropped {drops} handshakes, the farm recorded {retried['n']} retries"


# --------------------------------------------------- 12. a full disk at staging


def test_disk_full_while_staging(ssh_fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault 12, a node whose work folder is a 64 KiB tmpfs, and a sources
    bundle of 260 KiB, which the node's resident runner is sent whole and cannot
    write there.

    Its cell is infra-error at stage "stage" naming the bundle and "No space left
    on device", after 1 + retries = 3 setup attempts, and no half-written copy is
    left; a node on the same sshd with room passes.
    Figure: injected 1 full disk; 1/1 cell infra-error at stage, 0 kernel
    verdicts; 1/1 cell on the other node passes."""
    ballast = "".join(f"// ballast line {i:06d}: nothing but a comment to fill the disk\n" for i in range(5000))
    assert len(ballast) > 256 << 10
    disk = Tmpfs(tmp_path / "full", "64k")
    # the probe refuses a work folder with less than snapshot.MIN_FREE (test_verdicts.py): here the disk
    # fills between the probe and the staging, as another tenant's files can
    monkeypatch.setattr(snapshot, "MIN_FREE", 0)
    try:
        job = standin_job("standin", {"pass": standin_variant("PASS", MIN75, "MIN_CC=75")})
        job["sources"] = ["kernels/standin.cpp", "kernels/ballast.cpp"]
        nodes = {
            "full": ssh_fleet["t4"].farm_entry(disk.path),
            "roomy": ssh_fleet["t4"].farm_entry(tmp_path / "work-roomy"),
        }
        files = {"kernels/ballast.cpp": ballast.encode()}
        config = write_farm(tmp_path, nodes, [job], extra_files=files, **FAST_RETRIES)
        summary, _ = run_farm(config)
        left = sorted(p.name for p in (disk.path / "bundles").iterdir())
    finally:
        disk.unmount()
    db = tmp_path / "results.db"
    rows = results(db, summary.run_id)
    full = rows[("full", "pass")]
    assert (full["outcome"], full["failed_stage"]) == ("infra-error", "stage"), full["reason"]
    assert "placing sources of standin on full failed: sources of standin: " in full["reason"], full["reason"]
    assert "No space left on device" in full["reason"], full["reason"]
    assert left == [], left  # what could not be written is removed: a retry finds the room
    setup = attempts(db, summary.run_id, "full", None)
    assert [(a["status"], a["stage"]) for a in setup] == [("infra", "stage")] * 3
    assert rows[("roomy", "pass")]["outcome"] == "pass", rows[("roomy", "pass")]["reason"]
    assert not list((tmp_path / "archives").glob("*.tar.gz"))  # the runner was sent the files, not an archive
    assert summary.exit_code == EXIT_INFRA


# ------------------------------------------- issue 10: stop, restart, leave nothing


@pytest.mark.usefixtures("runner")  # with either node runner
def test_a_daemon_the_kernel_left_behind_is_killed(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Issue 10, case 3: a kernel that double-forks into a session of its own
    escapes the group kill; the cell's environment marker finds it.
    Figure: 1 daemon left by the kernel, 1 killed, none alive after the cell; the cell no pass
    (red-team 257: what the daemon would have done is unknown)."""
    workdir = tmp_path / "work-t4"
    config = write_farm(
        tmp_path,
        {"t4": ssh_fleet["t4"].farm_entry(workdir)},
        [faults_job({"daemon": faults_variant("DAEMON", MIN75)})],
    )
    summary, _ = run_farm(config)
    row = results(tmp_path / "results.db", summary.run_id)[("t4", "daemon")]
    assert row["outcome"] == "fail", row["reason"]  # a process left at work backs no pass (red-team 257)
    assert "1 process(es) of the run were still running" in row["reason"], row["reason"]
    detail = json.loads(row["stage_details"])["run"]["detail"]
    assert "1 leftover processes killed" in detail, detail
    left = [cmd for _, cmd in processes_matching(f"{workdir}/cells/") if cmd.endswith("/faults-daemon")]
    assert left == [], left


def test_a_daemon_that_cleared_its_environment_is_killed_too(ssh_fleet: Fleet, tmp_path: Path, runner: str) -> None:
    """A kernel's daemon that clears its environment (`env -i`) and leaves its session
    (`setsid`) escapes the marker's reap, and lived on as the farm's user: an adversarial
    review had one rewrite a later cell's stdout, its inspect dump and its private
    binary while it waited for the GPU, four false passes. The python3 runners are the
    cell's subreaper: what its commands leave is its child, and killed with the cell.
    The shell scripts have no subreaper: there it lives on, as the README says."""
    workdir = tmp_path / "work-t4"
    token = f"{os.getpid()}{int(time.time() * 1000) % 100000}"
    daemon = f"env -i /usr/bin/setsid /bin/sh -c 'exec sleep 300.{token}' </dev/null >/dev/null 2>&1 &"
    # a second for the daemon to leave the run's process group: a kernel that ended before its
    # setsid had it killed with the group, no leftover to count (a CI run's flake under load)
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", run=f"{daemon} sleep 1 && {{binary}}")
    config = write_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(workdir)}, [standin_job("standin", {"d": variant})])
    summary, _ = run_farm(config)
    row = results(tmp_path / "results.db", summary.run_id)[("t4", "d")]
    # counted where the runner's subreaper found it: no pass then (red-team 257); the shell's never sees it
    assert row["outcome"] == ("pass" if runner == "shell" else "fail"), row["reason"]
    time.sleep(0.5)
    alive = [pid for pid, cmd in processes_matching(f"sleep 300.{token}")]
    try:
        if runner == "shell":
            assert alive, "the shell scripts were given a subreaper: update this test and the README"
        else:
            assert alive == [], alive
            detail = json.loads(row["stage_details"])["run"]["detail"]
            assert "1 leftover processes killed" in detail, detail
    finally:
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def start_slow_run(ssh_fleet: Fleet, tmp_path: Path, slow_s: int):
    """`farm verify` in a subprocess on t4 with cells quick, slow (sleeps
    `slow_s`), after, one at a time; returns once the slow kernel runs:
    (workdir, config, db, log, the farm's Popen)."""
    workdir = tmp_path / "work-t4"
    variants = {
        "quick": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0"),
        "slow": faults_variant("SLOWPASS", MIN75, f"SLEEP_S={slow_s}", timeout=slow_s + 60),
        "after": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0"),
    }
    config = write_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(workdir, build_jobs=1)}, [faults_job(variants)])
    log = tmp_path / "farm.log"
    farm = farm_popen(tmp_path, "verify", "--all", "--config", str(config), "--no-report", log=log)
    try:
        wait_for(lambda: kernel_running(workdir, "t4", "slow") or farm.poll() is not None, 60, "the slow kernel")
    except BaseException:
        farm.kill()
        farm.wait()
        raise
    return workdir, config, tmp_path / "results.db", log, farm


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_the_run_cleanly(ssh_fleet: Fleet, tmp_path: Path, signum: int) -> None:
    """Issue 10, cases 1 and 2: SIGTERM (systemctl stop) and a first Ctrl-C
    stop starting cells, kill the running kernel on the node at once, record
    the unfinished cells not-run, store the run aborted with the exit code the
    process returns, and print the verdict line.
    Figure: a 60 s kernel stopped; the farm exits within 20 s (asserted); 2 cells not-run."""
    workdir, _, db, log, farm = start_slow_run(ssh_fleet, tmp_path, 60)
    try:
        assert farm.poll() is None, log.read_text()
        farm.send_signal(signum)
        stopped_at = time.monotonic()
        code = farm.wait(timeout=10 + KILL_GRACE + 5)
        took = time.monotonic() - stopped_at
    finally:
        if farm.poll() is None:
            farm.kill()
            farm.wait()
    text = log.read_text()
    name = signal.Signals(signum).name
    last = f"run 1: 1 as expected, 0 not, 0 infra, 2 not-run (stopped by {name}); exit 4"  # review 253's words
    assert f"run 1 was stopped by {name}" in text and last in text, text
    assert code == EXIT_INFRA, text
    (run,) = query(db, "SELECT * FROM runs")
    assert (run["status"], run["exit_code"]) == ("aborted", code)
    rows = results(db, 1)
    assert {v: r["outcome"] for (_, v), r in rows.items()} == {"quick": "pass", "slow": "not-run", "after": "not-run"}
    assert f"stopped ({name})" in rows[("t4", "slow")]["reason"]
    assert not kernel_running(workdir, "t4", "slow"), "the stopped kernel still runs on the node"
    print(f"{name}: farm exited {code} {took:.1f} s after the signal")


def test_a_second_ctrl_c_exits_at_once(ssh_fleet: Fleet, tmp_path: Path) -> None:
    workdir = tmp_path / "work-t4"
    variants = {"slow": faults_variant("SLOWPASS", MIN75, "SLEEP_S=60", timeout=120)}
    config = write_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(workdir)}, [faults_job(variants)])
    log = tmp_path / "farm.log"
    farm = farm_popen(tmp_path, "verify", "--all", "--config", str(config), "--no-report", log=log)
    try:
        wait_for(lambda: kernel_running(workdir, "t4", "slow") or farm.poll() is not None, 60, "the slow kernel")
        farm.send_signal(signal.SIGINT)
        time.sleep(0.05)
        farm.send_signal(signal.SIGINT)
        assert farm.wait(timeout=5) == 130, log.read_text()
    finally:
        if farm.poll() is None:
            farm.kill()
            farm.wait()


def test_an_unreadable_known_hosts_is_that_nodes_infra_error(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Issue 10, case 12: a known_hosts that is a folder, or not UTF-8, once
    aborted the whole run with a traceback; now it is that node's infra-error
    with the cause, and the other node's cell passes."""
    folder = tmp_path / "kh-folder"
    folder.mkdir()
    garbage = tmp_path / "kh-garbage"
    garbage.write_bytes(b"\xff\xfe\x00 not a known_hosts file \xc3\x28\n")
    nodes = {
        "folder": ssh_fleet["t4"].farm_entry(tmp_path / "w1", known_hosts=str(folder)),
        "garbage": ssh_fleet["t4"].farm_entry(tmp_path / "w2", known_hosts=str(garbage)),
        "fine": ssh_fleet["t4"].farm_entry(tmp_path / "w3"),
    }
    config = write_farm(tmp_path, nodes, [faults_job({"quick": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0")})])
    done = farm_cli(tmp_path, "verify", "--all", "--config", str(config), "--no-report")
    assert done.returncode == EXIT_INFRA, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    rows = results(tmp_path / "results.db", 1)
    assert rows[("fine", "quick")]["outcome"] == "pass"
    for name in ("folder", "garbage"):
        row = rows[(name, "quick")]
        assert (row["outcome"], row["failed_stage"]) == ("infra-error", "probe"), row["reason"]
        assert "cannot read its known_hosts" in row["reason"], row["reason"]


def test_a_deleted_database_stops_the_run_and_its_journal_rebuilds_it(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Issue 10, case 6: results.db deleted during a run. SQLite would go on
    writing into the unlinked file and the farm would print a normal verdict;
    now the next commit notices, the run stops with exit 5 naming its journal,
    and `farm import` rebuilds the run, every finished cell included.
    Figure: 1 database deleted mid-run; exit 5; 1 run with 2 cells imported."""
    _, config, db, log, farm = start_slow_run(ssh_fleet, tmp_path, 4)
    try:
        db.unlink()
        code = farm.wait(timeout=60)
    finally:
        if farm.poll() is None:
            farm.kill()
            farm.wait()
    text = log.read_text()
    assert code == 5, text
    (journal,) = (tmp_path / "results.db.journal").glob("*.jsonl")
    assert "was deleted during the run" in text and f"farm import {journal}" in text, text
    assert "Traceback" not in text
    imported = farm_cli(tmp_path, "import", str(journal), "--config", str(config))
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert "as run 1 (" in imported.stdout
    rows = results(db, 1)
    assert rows[("t4", "quick")]["outcome"] == "pass"
    assert bytes(rows[("t4", "quick")]["stdout"]).endswith(b"standin: PASS\n")
    assert rows[("t4", "slow")]["outcome"] == "pass", "the cell whose commit failed is in the journal"
    assert rows[("t4", "after")]["outcome"] == "not-run"
    again = farm_cli(tmp_path, "import", str(journal), "--config", str(config))
    assert again.returncode == 5 and "already in" in again.stderr


def test_a_node_that_reboots_is_waited_for_and_its_cell_rerun(own_nodes: list[SshNode], tmp_path: Path) -> None:
    """Issue 10, case 4: a node that drops mid-run (sshd and its sessions
    killed, as a reboot does) and comes back 4 s later, within
    reconnect_window: the interrupted cell is run again and passes; both
    attempts are stored. At 0f1e6ec its cells were infra-error after 2 to 6 s.
    Figure: 1 reboot of 4 s; 2/2 cells pass; the slow cell took 2 attempts."""
    node = start(own_nodes, SshNode("reboots", tmp_path / "node", CARDS["t4"]))
    workdir = tmp_path / "work"
    variants = {
        "slow": faults_variant("SLOWPASS", MIN75, "SLEEP_S=3", timeout=60),
        "after": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0"),
    }
    config = write_farm(
        tmp_path,
        {"reboots": node.farm_entry(workdir, build_jobs=1, connect_timeout=2)},
        [faults_job(variants)],
        reconnect_window=60.0,
        retries=0,
    )
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.update(run=run_farm(config)), daemon=True)
    thread.start()
    wait_for(lambda: kernel_running(workdir, "reboots", "slow") or not thread.is_alive(), 60, "the slow kernel")
    signal_pids(sshd_tree(node), signal.SIGKILL)  # the machine goes away, sessions and all
    node.proc.wait()
    time.sleep(4)
    node.start()  # and comes back, with the same host key
    thread.join(timeout=120)
    assert not thread.is_alive(), "the farm never finished"
    summary, _ = outcome["run"]  # type: ignore[misc]
    rows = results(tmp_path / "results.db", summary.run_id)
    assert rows[("reboots", "slow")]["outcome"] == "pass", rows[("reboots", "slow")]["reason"]
    assert rows[("reboots", "after")]["outcome"] == "pass"
    tries = attempts(tmp_path / "results.db", summary.run_id, "reboots", "slow")
    assert [t["status"] for t in tries] == ["infra", "ok"], [dict(t) for t in tries]
    assert summary.exit_code == EXIT_OK


def session_signalled(
    own_nodes: list[SshNode],
    tmp_path: Path,
    sig: signal.Signals,
    until: Callable[[list[int]], object] | None = None,
    connect_timeout: int = 10,
) -> tuple[RunSummary, dict, list[dict]]:
    """A node's sshd sessions (not its listener) sent `sig` while a cell's slow kernel runs
    (`until(kernel pids)` waited for after it; SIGSTOP is undone once the run ended, or
    failed to): the run's summary, the cell's row and its attempts. `connect_timeout` also bounds
    a session asked for on the frozen connection (the kill of what the lost runner left)."""
    node = start(own_nodes, SshNode("sessions", tmp_path / "node", CARDS["t4"]))
    workdir = tmp_path / "work"
    variants = {"slow": faults_variant("SLOWPASS", MIN75, "SLEEP_S=4", timeout=60)}
    config = write_farm(
        tmp_path,
        {"sessions": node.farm_entry(workdir, build_jobs=1, connect_timeout=connect_timeout)},
        [faults_job(variants)],
        retries=2,
    )
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.update(run=run_farm(config)), daemon=True)
    thread.start()
    kernel = wait_for(lambda: kernel_running(workdir, "sessions", "slow") or not thread.is_alive(), 60, "the kernel")
    reached = signal_pids([pid for pid, comm in descendants(node.proc.pid) if comm.startswith("sshd")], sig)
    try:
        assert reached, "no session to signal"
        if until is not None:
            until(kernel)  # type: ignore[arg-type]
        thread.join(timeout=120)
    finally:
        if sig == signal.SIGSTOP:
            signal_pids(reached, signal.SIGCONT)
    assert not thread.is_alive(), "the farm never finished"
    summary, _ = outcome["run"]  # type: ignore[misc]
    row = results(tmp_path / "results.db", summary.run_id)[("sessions", "slow")]
    return summary, row, attempts(tmp_path / "results.db", summary.run_id, "sessions", "slow")


@pytest.mark.usefixtures("runner")
def test_a_cut_session_leaves_nothing_of_its_try_beside_the_retry(own_nodes: list[SshNode], tmp_path: Path) -> None:
    """Found by a red-team helper: the node's sshd session processes SIGKILLed while the
    kernel ran, its listener up. The kill of what was left of the cell went over the
    broken connection and failed unsaid: the interrupted try's kernel ran on beside the
    retry, and, ending, removed the cell's folder under the retry's kernel (a kernel that
    always passes was judged fail 3 times in 8). What is left is killed over a fresh
    connection (with each runner: the python3 of a cell's own was never killed), and each
    retry has a folder of its own: the cell passes."""

    def gone(pids: list[int]) -> None:
        wait_for(
            lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), 10, "the interrupted try's kernel gone"
        )

    summary, row, tries = session_signalled(own_nodes, tmp_path, signal.SIGKILL, gone)
    assert row["outcome"] == "pass", row["reason"]
    assert [t["status"] for t in tries] == ["infra", "ok"], tries
    assert summary.exit_code == EXIT_OK


def test_a_frozen_session_is_left_for_a_fresh_one(
    own_nodes: list[SshNode], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a red-team helper: the node's sshd session SIGSTOPped while the kernel ran, its
    listener up. The resident runner said nothing for 20 s and the cell's try was infra-error;
    its retries went to the same frozen runner, each waiting out the silence (6 tries, 128 s,
    infra-error). The silent runner is now taken for lost, and the retry passes on a fresh one.
    The silence allowed is 8 s here (20 s in a run): still past the runner's beat of 3 s; the
    connect_timeout 4 s (10 s took 24 s of CI: the lost runner's kill first asks its frozen connection
    for a session, for as long)."""
    monkeypatch.setattr(resident, "SILENT_LIMIT", 8.0)
    summary, row, tries = session_signalled(own_nodes, tmp_path, signal.SIGSTOP, connect_timeout=4)
    assert row["outcome"] == "pass", row["reason"]
    assert [t["status"] for t in tries] == ["infra", "ok"], tries
    assert "said nothing for" in tries[0]["error"] and summary.exit_code == EXIT_OK


def test_a_full_disk_under_the_database_loses_nothing(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Issue 10, case 5: results.db on a 700 KiB tmpfs, the journal on another
    disk (farm.yaml `journal:`), a kernel whose kept output (1 MiB) cannot fit.
    The commit fails: exit 5 with one Error line naming the journal; the
    journal holds the cell, and `farm import` rebuilds the run elsewhere.
    Figure: 1 full disk; exit 5; 1/1 cell (its 1 MiB of output) recovered."""
    disk = Tmpfs(tmp_path / "small", "700k")
    try:
        workdir = tmp_path / "work-t4"
        variants = {"flood": faults_variant("FLOOD", MIN75, "FLOOD_MIB=2")}
        config = write_farm(
            tmp_path,
            {"t4": ssh_fleet["t4"].farm_entry(workdir)},
            [faults_job(variants)],
            database=f"sqlite:///{disk.path / 'results.db'}",
            journal="journals",
        )
        done = farm_cli(tmp_path, "verify", "--all", "--config", str(config), "--no-report")
    finally:
        disk.unmount()
    assert done.returncode == 5, done.stdout + done.stderr
    assert done.stderr.startswith("Error: ") and "Traceback" not in done.stderr, done.stderr
    assert "full" in done.stderr, done.stderr  # SQLite: "database or disk is full"
    print(done.stderr.strip())
    (journal,) = (tmp_path / "journals").glob("*.jsonl")
    assert f"farm import {journal}" in done.stderr, done.stderr
    elsewhere = f"sqlite:///{tmp_path / 'recovered.db'}"
    imported = farm_cli(tmp_path, "import", str(journal), "--config", str(config), "--database", elsewhere)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    (row,) = query(tmp_path / "recovered.db", "SELECT * FROM results")
    assert row["outcome"] == "pass" and row["stdout_size"] > 2 << 20, row["reason"]


SPARSE = (
    # run by the kernel first: seeks its stdout 4 GiB ahead (the offset is the kernel's too), then
    # the kernel writes there
    'python3 -c "import os, signal; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); '
    "os.lseek(1, 1 << 32, 0); os.write(1, b'standin: ' b'PASS')\"\n"
)


@pytest.mark.usefixtures("runner")  # with either node runner
def test_a_kernel_seeking_gigabytes_ahead_in_its_output_fails_on_its_own(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Found by a red-team helper: a kernel that seeks 4 GiB ahead in its stdout and writes
    one line costs itself nothing, but the farm read, hashed and scanned every byte, passed
    the stage's budget, and the cell was infra-error, retried for minutes (exit 4), not the
    kernel's own failure. Its files are limited to commands.OUTPUT_LIMIT now: SIGXFSZ, `fail`."""
    prelude = tmp_path / "sparse.sh"
    prelude.write_text(SPARSE)
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    config = write_farm(tmp_path, nodes, [standin_job("standin", {"sparse": variant})], retries=0)
    started = time.monotonic()
    summary, _ = run_farm(config)
    (row,) = results(tmp_path / "results.db", summary.run_id).values()
    assert (row["outcome"], row["failed_stage"]) == ("fail", "run"), row["reason"]
    assert "killed by SIGXFSZ" in row["reason"] and "size limit" in row["reason"], row["reason"]
    assert row["stdout_size"] < OUTPUT_LIMIT
    assert time.monotonic() - started < 60


HUNG_LISTS = """#!/bin/sh
case "$1" in
  --version) echo 'Cuda compiler driver, release 13.0, V13.0.88'; exit 0 ;;
  --dump-sass) echo '        /*0000*/                   HMMA.16816.F32 R4, R8, R12, R4 ;'; exit 0 ;;
  *) exec {linger} ;;
esac
"""


@pytest.mark.usefixtures("runner")  # with either node runner
def test_a_cuobjdump_that_hangs_on_its_lists_costs_its_cell_seconds(
    ssh_fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a red-team helper: after the dump, the node ran cuobjdump's two lists with
    the dump's budget (300 s) each, past the farm's wait for the stage (330 s): the trip was
    taken for a lost node and sent again every 330 s, and each abandoned list lived on. Each
    list has stages.inspect.LIST_TIMEOUT now (2 s here), within the stage's wait, and is killed."""
    monkeypatch.setattr(stages.inspect, "LIST_TIMEOUT", 2)
    tool = tmp_path / "cuobjdump"
    linger = own_sleep(307)  # this test's alone: another session's run of it may be mid-list
    tool.write_text(HUNG_LISTS.replace("{linger}", linger))
    tool.chmod(0o755)
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", inspect="{cuobjdump} --dump-sass {binary}")
    variant["instructions"] = {"HMMA": 1}
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4", cuobjdump=str(tool))}
    config = write_farm(tmp_path, nodes, [standin_job("standin", {"lists": variant})], retries=0)
    summary, seconds = run_farm(config)
    (row,) = results(tmp_path / "results.db", summary.run_id).values()
    assert row["outcome"] == "pass", row["reason"]
    assert seconds < 60, seconds
    assert [a["status"] for a in attempts(tmp_path / "results.db", summary.run_id, "t4", "lists")] == ["ok"]
    assert not processes_matching(linger), "a list cuobjdump started outlived its stage"
