"""Slurm partitions as farm nodes, on a real single-host Slurm (tests/slurm.py).

The farm's own machine is the login node; partitions t4, a100 and h100 each
have a compute node whose jobs see that card's nvidia-smi stand-in, and
`parked` has a node that is DOWN. Every command the farm sends is a Slurm
job; the probe, the matrix of stand-in cells, and the ways Slurm itself ends a
job (pending limit, scancel, NODE_FAIL, refusal) are asserted through the
library API, the CLI and the transport.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import processes_matching, query, standin_job, standin_variant, write_farm
from slurm import PARKED, SlurmCluster, node_name, running_cluster

from orchestrator.config.farm import Farm, load_farm
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import CommandTimeout, ConfigError, InfraError
from orchestrator.plan import plan_cells
from orchestrator.run.scheduler import FarmRun, run_cells
from orchestrator.run.summary import RunSummary
from orchestrator.store.database import Store
from orchestrator.transport import transport_for
from orchestrator.transport.slurm import (
    SlurmJob,
    SlurmJobError,
    SlurmPendingLimit,
    SlurmRejected,
    SlurmTransport,
)

KERNEL = "standin"
VARIANTS = {
    "min75": standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75"),
    "hopper": standin_variant("PASS", {"exactly": "9.0"}, "EXACT_CC=90"),
    "hang": standin_variant("HANG", {"min": "7.5"}, "MIN_CC=75", timeout=60),
}
# (node, variant) -> (expected, outcome)
TABLE = {
    ("t4", "min75"): ("pass", "pass"),
    ("t4", "hopper"): ("expected-refusal", "expected-refusal"),
    ("a100", "min75"): ("pass", "pass"),
    ("a100", "hopper"): ("expected-refusal", "expected-refusal"),
    ("h100", "min75"): ("pass", "pass"),
    ("h100", "hopper"): ("pass", "pass"),
    (PARKED, "min75"): ("pass", "infra-error"),
}
PARKED_LIMIT = 3


def nvcc() -> str:
    found = shutil.which("nvcc") or "/usr/local/bin/nvcc"
    assert Path(found).exists(), "the probe needs an nvcc (scripts/setup.sh installs one)"
    return found


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with running_cluster() as c:
        yield c


def make_farm(root: Path, cluster: SlurmCluster, nodes: dict[str, dict], **farm_keys: object) -> Farm:
    entries = {
        name: cluster.farm_entry(partition, root / f"work-{name}", nvcc(), **extra)
        for name, (partition, extra) in nodes.items()
    }
    return load_farm(write_farm(root, entries, [standin_job(KERNEL, VARIANTS)], **farm_keys))


def run(root: Path, farm: Farm, table) -> RunSummary:
    cells = []
    for node in dict.fromkeys(n for n, _ in table):
        cells += plan_cells(farm, [f"{KERNEL}:{v}" for n, v in table if n == node], [node])
    store = Store(farm.database_url)
    try:
        return run_cells(farm, store, cells, cache_dir=root / "archives", trigger="test")
    finally:
        store.close()


@dataclass
class MatrixRun:
    root: Path
    farm: Farm
    summary: RunSummary
    seconds: float

    @property
    def db(self) -> Path:
        return self.root / "results.db"

    def row(self, node: str, variant: str) -> sqlite3.Row:
        rows = query(
            self.db,
            "SELECT * FROM results WHERE run_id = ? AND node = ? AND variant = ?",
            self.summary.run_id,
            node,
            variant,
        )
        assert len(rows) == 1, (node, variant, len(rows))
        return rows[0]


@pytest.fixture(scope="module")
def matrix(cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> MatrixRun:
    root = tmp_path_factory.mktemp("slurmfarm")
    nodes = {p: (p, {}) for p in ("t4", "a100", "h100")}
    nodes[PARKED] = (PARKED, {"pending_limit": PARKED_LIMIT, "gpu": "NVIDIA H100 80GB HBM3", "cc": "9.0"})
    farm = make_farm(root, cluster, nodes)
    clock = time.monotonic()
    summary = run(root, farm, TABLE)
    return MatrixRun(root, farm, summary, time.monotonic() - clock)


# ------------------------------------------------------------------ the farm


def test_slurm_node_entries_validate(tmp_path: Path) -> None:
    spec = NodeSpec(transport="slurm", partition="h100", gres="gpu:1", time_limit=5)
    assert (spec.host, spec.pending_limit, spec.constraint) == (None, 300, None)
    bad = {
        "nopart": {"transport": "slurm"},
        "sshpart": {"transport": "ssh", "host": "h", "partition": "t4"},
        "option": {"transport": "slurm", "partition": "t4", "slurm_options": ["account=x"]},
    }
    for name, entry in bad.items():
        path = write_farm(tmp_path / name, {name: entry}, [standin_job(KERNEL, VARIANTS)])
        with pytest.raises(ConfigError) as err:
            load_farm(path)
        assert f"nodes.{name}" in str(err.value), str(err.value)


@pytest.mark.parametrize(("node", "variant"), list(TABLE), ids=[f"{v}@{n}" for n, v in TABLE])
def test_cells_through_slurm_in_database(matrix: MatrixRun, node: str, variant: str) -> None:
    row = matrix.row(node, variant)
    assert (row["expected"], row["outcome"]) == TABLE[(node, variant)], (
        f"{variant}@{node}: {row['outcome']} ({row['reason']!r}; stderr {bytes(row['stderr'])[-300:]!r})"
    )


def test_kernels_saw_their_partitions_card(matrix: MatrixRun) -> None:
    for node, cc in (("t4", "7.5"), ("a100", "8.0"), ("h100", "9.0")):
        assert f"standin: device CC {cc}".encode() in bytes(matrix.row(node, "min75")["stdout"]), node
    for node, cc in (("t4", "7.5"), ("a100", "8.0")):
        refusal = matrix.row(node, "hopper")
        assert refusal["exit_code"] == 1
        assert f"standin needs CC 9.0 and this device is {cc}".encode() == bytes(refusal["stderr"]).strip()
    assert b"standin: PASS" in bytes(matrix.row("h100", "hopper")["stdout"])
    assert matrix.summary.exit_code == 4, "as expected everywhere, but parked could not run: exit 4"


def test_probe_ran_as_a_job_in_each_partition(matrix: MatrixRun) -> None:
    snaps = {
        r["node"]: r for r in query(matrix.db, "SELECT * FROM node_snapshots WHERE run_id = ?", matrix.summary.run_id)
    }
    for node in ("t4", "a100", "h100"):
        card = matrix.farm.nodes[node]
        s = snaps[node]
        assert (s["transport"], s["gpu_name"], s["cc"], s["gpu_count"]) == ("slurm", card.gpu, card.cc, 1), node
        assert s["address"] == f"slurm:{node} via local"
        assert s["probe_error"] is None
        assert s["bytes_shipped"] > 0, "sources staged on the shared work folder"
        assert not s["real_gpu"], "a stand-in certifies nothing"
    assert "pending limit" in snaps[PARKED]["probe_error"]


def test_every_command_was_a_job_on_its_partitions_node(matrix: MatrixRun, cluster: SlurmCluster) -> None:
    jobs = [j for j in cluster.jobs() if j["name"].startswith("farm-")]
    for node in ("t4", "a100", "h100"):
        mine = [j for j in jobs if j["name"].startswith(f"farm-{node}-")]
        # probe + staging + (build, inspect, run, clean-up) per cell, at the least
        assert len(mine) >= 1 + 4 * 2, (node, len(mine))
        assert {(j["partition"], j["node"]) for j in mine} == {(node, node_name(node))}
        # FAILED: a command's own non-zero exit (a `test -f` that found nothing, a refusal)
        assert {j["state"] for j in mine} <= {"COMPLETED", "FAILED"}


def test_pending_limit_is_infra_not_a_verdict(matrix: MatrixRun) -> None:
    row = matrix.row(PARKED, "min75")
    assert row["outcome"] == "infra-error"
    assert row["failed_stage"] == "probe"
    assert row["exit_code"] is None
    assert f"waited past its pending limit of {PARKED_LIMIT} s in partition 'parked'" in row["reason"]
    assert "DOWN" in row["reason"], "Slurm's own reason is kept"
    attempts = query(matrix.db, "SELECT * FROM attempts WHERE run_id = ? AND node = ?", matrix.summary.run_id, PARKED)
    assert [(a["status"], a["stage"]) for a in attempts] == [("infra", "probe")], "waiting again is no retry"


def test_farm_nodes_shows_each_partitions_card(matrix: MatrixRun) -> None:
    done = farm("nodes", "--config", str(matrix.farm.file), timeout=120)
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[1:] if line.strip()}
    assert "Tesla T4" in lines["t4"] and " 7.5 " in lines["t4"], done.stdout
    assert "NVIDIA A100-SXM4-40GB" in lines["a100"] and " 8.0 " in lines["a100"], done.stdout
    assert "NVIDIA H100 80GB HBM3" in lines["h100"] and " 9.0 " in lines["h100"], done.stdout
    assert "unreachable" in lines[PARKED] and "pending limit" in lines[PARKED], done.stdout
    assert done.returncode == 4, done.stdout + done.stderr


def test_cancelled_job_is_infra_not_a_verdict(cluster: SlurmCluster, tmp_path: Path) -> None:
    farm = make_farm(tmp_path, cluster, {"t4": ("t4", {})})  # retries: 2, but a cancelled job is not resubmitted
    binary_prefix = f"{tmp_path / 'work-t4'}/cells/"
    cancelled: list[str] = []

    def kernels() -> list[tuple[int, str]]:
        """The stand-in itself (and its child), not the g++ that builds it."""
        return [(pid, cmd) for pid, cmd in processes_matching(binary_prefix) if cmd.startswith(binary_prefix)]

    def cancel_when_the_kernel_runs() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if kernels():
                time.sleep(0.5)  # its job's first output line reaches srun first (else: "before its command started")
                running = cluster.jobs(states="RUNNING", partition="t4")
                if running:
                    cancelled.append(running[0]["id"])
                    cluster.cmd(["scancel", running[0]["id"]])
                    return
            time.sleep(0.1)

    killer = threading.Thread(target=cancel_when_the_kernel_runs, daemon=True)
    killer.start()
    summary = run(tmp_path, farm, {("t4", "hang"): None})
    killer.join(5)
    assert cancelled, "the hanging kernel's job was never seen running"
    (row,) = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    assert (row["outcome"], row["failed_stage"], row["exit_code"]) == ("infra-error", "run", None), row["reason"]
    attempts = query(
        tmp_path / "results.db", "SELECT * FROM attempts WHERE run_id = ? AND kernel IS NOT NULL", summary.run_id
    )
    assert [(a["status"], a["stage"]) for a in attempts] == [("infra", "run")]
    assert f"Slurm job {cancelled[0]} on t4node was cancelled" in row["reason"]
    assert "CANCELLED" in row["reason"]
    assert (row["slurm_job_id"], row["compute_node"]) == (cancelled[0], "t4node")
    deadline = time.monotonic() + 15
    while kernels() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not kernels(), "Slurm killed the kernel and its child"


def test_stopping_a_run_cancels_its_jobs(cluster: SlurmCluster, tmp_path: Path) -> None:
    """Issue 10: a stopped run (SIGTERM, a first Ctrl-C) scancels its own Slurm
    jobs, whichever compute node runs them: every job name carries the run's
    token. The hanging kernel's job is gone within seconds, the cell is not-run
    (never a verdict), and the cell after it is never started."""
    farm = make_farm(tmp_path, cluster, {"t4": ("t4", {"build_jobs": 1})})
    cells = plan_cells(farm, [f"{KERNEL}:hang", f"{KERNEL}:min75"], ["t4"])
    store = Store(farm.database_url)
    farm_run = FarmRun(farm, store, cache_dir=tmp_path / "archives", trigger="test")
    done: list[RunSummary] = []
    thread = threading.Thread(target=lambda: done.append(farm_run.execute(cells)), daemon=True)
    thread.start()
    try:
        ours = f"-{farm_run.token}-"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            running = [j for j in cluster.jobs(states="RUNNING", partition="t4") if ours in j["name"]]
            # the kernel itself, not the g++ of its build (whose job could end between this look and
            # the stop's squeue: "0 cancelled", a CI flake)
            prefix = f"{tmp_path / 'work-t4'}/cells/"
            if running and any(cmd.startswith(prefix) for _, cmd in processes_matching(prefix)):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the hanging kernel's job never ran")
        clock = time.monotonic()
        # a grace of its own: the default 10 s gives each squeue 2 s, which a CI machine's load
        # once outlasted (stop counted 0; the sweeps after it cancelled the job)
        cancelled = farm_run.stop("SIGTERM", grace=30)
        assert cancelled >= 1
        active = "PENDING,RUNNING,COMPLETING,CONFIGURING"
        while [j for j in cluster.jobs(states=active) if ours in j["name"]] and time.monotonic() - clock < 20:
            time.sleep(0.2)
        assert not [j for j in cluster.jobs(states=active) if ours in j["name"]], "the run's jobs outlived its stop"
        thread.join(60)
        assert done, "the run did not end after its stop"
    finally:
        store.close()
    rows = {r["variant"]: r for r in query(tmp_path / "results.db", "SELECT * FROM results")}
    assert {v: r["outcome"] for v, r in rows.items()} == {"hang": "not-run", "min75": "not-run"}, {
        v: r["reason"] for v, r in rows.items()
    }
    (run_row,) = query(tmp_path / "results.db", "SELECT * FROM runs")
    assert run_row["status"] == "aborted"
    print(f"stop: {cancelled} job(s) cancelled, all gone {time.monotonic() - clock:.1f} s after the stop")


def test_job_id_and_compute_node_are_stored_with_each_result(matrix: MatrixRun, cluster: SlurmCluster) -> None:
    jobs = {j["id"]: j for j in cluster.jobs()}
    for node, variant in TABLE:
        row = matrix.row(node, variant)
        if node == PARKED:
            assert (row["slurm_job_id"], row["compute_node"]) == (None, None)
            continue
        job = jobs[row["slurm_job_id"]]
        assert row["compute_node"] == job["node"] == node_name(node)
        assert job["partition"] == node and job["name"].startswith(f"farm-{node}-")


# ------------------------------------------------------------- the transport


def transport(cluster: SlurmCluster, partition: str, **extra: object) -> SlurmTransport:
    entry = cluster.farm_entry(partition, Path("/tmp"), "nvcc", **extra)
    entry.pop("workdir")
    t = transport_for(f"direct-{partition}", NodeSpec(**entry))
    assert isinstance(t, SlurmTransport)
    return t


def test_transport_runs_a_job_and_reports_its_id_and_node(cluster: SlurmCluster) -> None:
    with transport(cluster, "h100") as t:
        result = t.run(
            "echo out; printf 'no newline' >&2; nvidia-smi --query-gpu=compute_cap --format=csv,noheader; exit 3",
            timeout=30,
        )
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n9.0\n", "no newline")
        job_id, node = t.last_job_id, t.last_compute_node
        assert job_id and job_id.isdigit()
        assert node == "h100node"
        assert t.last_job.state == "FAILED", "the command's own non-zero exit, a result"
        assert any("Exited with exit code 3" in m for m in t.last_job.messages), "srun's lines kept aside"
        record = [j for j in cluster.jobs() if j["id"] == job_id]
        assert [(j["partition"], j["node"], j["name"]) for j in record] == [("h100", "h100node", t.last_job.name)]
        assert t.run("printf abc", timeout=30).stdout == "abc"
        assert t.last_job_id != job_id and len(t.jobs) == 2


def test_a_runs_own_srun_is_a_step_that_overlaps_the_farms(cluster: SlurmCluster) -> None:
    """`srun {binary}` (srun is a listed launcher) on a Slurm node waited, as a step of the
    job whose one step (the farm's) holds its resources, until the cell's timeout: every
    such cell a timeout, the kernel never started (a red-team finding). It starts now."""
    with transport(cluster, "t4") as t:
        result = t.run("srun sh -c 'echo nested on $SLURMD_NODENAME; exit 4'", timeout=25)
        assert (result.exit_code, result.stdout) == (4, "nested on t4node\n"), result


def test_refused_requests_are_infra_and_not_retried(cluster: SlurmCluster) -> None:
    with transport(cluster, "t4", gres="gpu:2") as t, pytest.raises(SlurmRejected) as err:
        t.run("echo never", timeout=30)
    assert not err.value.retryable
    assert "Requested node configuration is not available" in str(err.value)
    assert t.last_compute_node is None
    with transport(cluster, "nosuch") as t, pytest.raises(SlurmRejected) as err:
        t.run("echo never", timeout=30)
    assert "Invalid partition" in str(err.value) and t.last_job_id is None


def test_busy_gpu_past_the_pending_limit_is_infra(cluster: SlurmCluster) -> None:
    holder = subprocess.Popen(
        [shutil.which("srun") or "srun", "-p", "a100", "--gres=gpu:1", "--job-name=farm-test-holder", "sleep", "60"],
        env=cluster.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while not any(j["name"] == "farm-test-holder" for j in cluster.jobs(states="RUNNING")):
            assert time.monotonic() < deadline, "the holder job never ran"
            time.sleep(0.1)
        clock = time.monotonic()
        with transport(cluster, "a100", pending_limit=2) as t, pytest.raises(SlurmPendingLimit) as err:
            t.run("echo never", timeout=30)
        assert 2 <= time.monotonic() - clock < 15
        assert isinstance(err.value, InfraError) and not err.value.retryable, "a retry would only wait longer"
        assert "waited past its pending limit of 2 s" in str(err.value)
        assert t.last_job_id is not None and t.last_job.state == "CANCELLED"
    finally:
        cluster.cmd(["scancel", "--name=farm-test-holder"], check=False)
        holder.wait(30)


def test_node_failure_under_a_job_is_infra(cluster: SlurmCluster, tmp_path: Path) -> None:
    errors: list[BaseException] = []
    started = tmp_path / "started"

    def job() -> None:
        try:
            with transport(cluster, "a100") as t:
                t.run(f"touch {started}; sleep 30; echo done", timeout=60)
        except BaseException as err:
            errors.append(err)

    worker = threading.Thread(target=job)
    worker.start()
    try:
        deadline = time.monotonic() + 15
        while not started.exists():  # the command itself runs, not only its allocation
            assert time.monotonic() < deadline, "the job never ran"
            time.sleep(0.1)
        cluster.cmd(["scontrol", "update", "nodename=a100node", "state=down", "reason=farm test: node failure"])
        worker.join(30)
    finally:
        cluster.cmd(["scontrol", "update", "nodename=a100node", "state=resume"], check=False)
        cluster.wait_idle()
    assert not worker.is_alive()
    (err,) = errors
    assert isinstance(err, SlurmJobError), repr(err)
    assert "on a100node lost its compute node (NODE_FAIL) while it ran" in str(err)
    assert err.job.state == "NODE_FAIL" and err.job.compute_node == "a100node"
    assert err.retryable, "another node, or this one back, may run it"


def test_a_job_the_farm_gives_up_on_is_cancelled(cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestrator.transport.slurm as slurm_transport

    monkeypatch.setattr(slurm_transport, "SUBMIT_MARGIN", 0.0)  # the login side's wait: 1 s + 1 s pending limit
    with transport(cluster, "h100", pending_limit=1) as t, pytest.raises(CommandTimeout) as err:
        t.run("sleep 60", timeout=1)
    assert isinstance(err.value, SlurmJobError) and "cancelled" in str(err.value)
    deadline = time.monotonic() + 15
    while any(j["name"] == t.last_job.name for j in cluster.jobs(states="RUNNING,COMPLETING")):
        assert time.monotonic() < deadline, "the abandoned job still runs"
        time.sleep(0.2)
    (record,) = [j for j in cluster.jobs() if j["name"] == t.last_job.name]
    assert record["state"] == "CANCELLED"


def cancelled_job(transport: SlurmTransport) -> None:
    with contextlib.suppress(InfraError):  # cancelled: SlurmCancelled
        transport.run("sleep 60", timeout=90)


def test_a_stop_asks_squeue_again_and_says_when_it_never_answers(cluster: SlurmCluster, tmp_path: Path) -> None:
    """A busy slurmctld may fail a query; a stop that took squeue's silence for "no
    jobs" cancelled nothing and said 0 (seen once in CI). It asks again, each try
    within its share of the stop's time (a hanging query is cut short); a squeue
    that never answers is an InfraError naming it (the stop's sweeps try again)."""
    real = shutil.which("squeue")
    assert real
    shim = tmp_path / "bin"
    shim.mkdir()
    count = tmp_path / "failures"
    (shim / "squeue").write_text(
        f'#!/bin/sh\nn=$(cat {count}); if [ "$n" != always ] && [ "$n" -le 0 ]; then exec {real} "$@"; fi\n'
        f'[ "$n" = always ] || echo $((n-1)) > {count}\n'
        f'[ "$n" != 2 ] || exec sleep 60\n'  # the first try hangs as a busy slurmctld's would
        'echo "squeue: error: Socket timed out on send/recv operation" >&2; exit 1\n'
    )
    (shim / "squeue").chmod(0o755)
    token = secrets.token_hex(8)
    entry = cluster.farm_entry("t4", Path("/tmp"), "nvcc")
    entry.pop("workdir")
    submitting = SlurmTransport("t4", NodeSpec(**entry), run_token=token)
    entry["env"] = {**entry["env"], "PATH": f"{shim}:{os.environ['PATH']}"}
    stopping = SlurmTransport("t4", NodeSpec(**entry))
    with submitting, stopping:
        for failures, expect in (("2", 1), ("always", None)):
            count.write_text(failures)
            job = threading.Thread(target=cancelled_job, args=(submitting,), daemon=True)
            job.start()
            deadline = time.monotonic() + 60
            while not [j for j in cluster.jobs(states="RUNNING") if token in j["name"]]:
                assert time.monotonic() < deadline, "the job never ran"
                time.sleep(0.2)
            if expect is None:
                with pytest.raises(InfraError, match="squeue failed: squeue: error: Socket timed out"):
                    stopping.stop_run(token, 30)
                count.write_text("0")
                assert stopping.stop_run(token, 30) == 1
            else:
                clock = time.monotonic()
                assert stopping.stop_run(token, 10) == expect
                assert count.read_text().strip() == "0"  # it was asked again, and answered
                assert time.monotonic() - clock < 8  # the hanging first try was cut short
            job.join(60)


def test_without_slurms_record_only_slurms_own_words_make_infra() -> None:
    t = SlurmTransport("x", NodeSpec(transport="slurm", partition="p"))
    failed = SlurmJob(name="farm-x-1", job_id="7", compute_node="n1", started=True)
    failed.messages = ["srun: error: n1: task 0: Exited with exit code 1"]
    t._judge(failed, 1, 0.5)  # the command's own failure: a result
    crashed = SlurmJob(name="farm-x-2", job_id="8", compute_node="n1", started=True)
    crashed.messages = ["srun: error: n1: task 0: Segmentation fault"]
    t._judge(crashed, 139, 0.5)
    cancelled = SlurmJob(name="farm-x-3", job_id="9", compute_node="n1", started=True)
    cancelled.messages = ["slurmstepd-n1: error: *** STEP 9.0 ON n1 CANCELLED AT 2026-11-29T13:30:02 ***"]
    with pytest.raises(SlurmJobError, match="Slurm job 9 on n1 ended abnormally"):
        t._judge(cancelled, 143, 0.5)


def test_login_node_over_ssh(cluster: SlurmCluster, ssh_fleet, tmp_path: Path) -> None:
    """The login node reached over OpenSSH (strict host keys): jobs, put and read go through it."""
    login = ssh_fleet["nogpu"]  # no nvidia-smi of its own: only the compute node's answers
    entry = {**login.farm_entry(tmp_path), **cluster.farm_entry("h100", tmp_path, "nvcc")}
    assert entry["transport"] == "slurm" and entry["host"] == "127.0.0.1"
    with transport_for("viassh", NodeSpec(**entry)) as t:
        assert isinstance(t, SlurmTransport)
        result = t.run("nvidia-smi --query-gpu=compute_cap --format=csv,noheader; cat sent", timeout=30)
        assert (result.exit_code, result.stderr) == (1, "cat: sent: No such file or directory\n")
        assert result.stdout == "9.0\n" and t.last_compute_node == "h100node"
        source = tmp_path / "source.txt"
        source.write_text("through sftp\n")
        t.run(f"mkdir -p {tmp_path}/shared", timeout=30)  # as staging.ensure does: SFTP makes no folders
        t.put(source, f"{tmp_path}/shared/sent")
        t.run(f"cd {tmp_path}/shared && tr a-z A-Z < sent > back", timeout=30)
        assert t.read(f"{tmp_path}/shared/back", 100) == b"THROUGH SFTP\n"
        assert t.last_job_id is not None and t.last_job.state == "COMPLETED"
