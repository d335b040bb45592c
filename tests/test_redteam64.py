"""Red-team round 64: Slurm faults the farm had not seen, on a real single-host Slurm (tests/slurm.py).

Slurm ends a job's step without ending the job: `scancel JOBID.0` (an operator cancelling the step
they see in `squeue -s`), `scancel --signal=TERM JOBID`, and an srun that the login node terminates
(a login node's process watchdog, an operator's kill). slurmstepd says "*** STEP N.0 ... CANCELLED
***", yet the job's record reads COMPLETED or FAILED, and the farm took the shell's exit status, even
0 with the words of a command that never finished, for the command's own. And an srun killed outright
left its job RUNNING, holding the compute node's GPU until its time limit while the farm went on.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import test_slurm
from nodes import processes_matching, query
from slurm import SlurmCluster
from test_slurm import (
    KERNEL,
    make_farm,
    run,
    transport,
)

import orchestrator.transport.slurm as slurm_transport
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import InfraError
from orchestrator.transport.slurm import SlurmCancelled, SlurmJob, SlurmJobError, SlurmTimeLimit, SlurmTransport

cluster = test_slurm.cluster  # a Slurm cluster of this module's own, started as test_slurm starts its own


def wait_for(what: str, ready: Callable[[], object], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def run_while(
    cluster: SlurmCluster,
    tmp_path: Path,
    act: Callable[[SlurmTransport, str], None],
    command: str = "sleep 20",
    partition: str = "t4",
    **extra: object,
) -> tuple[SlurmTransport, BaseException | None, object]:
    """Run `touch started; COMMAND; echo done` as a job on PARTITION (t4; EXTRA: the node's farm.yaml
    keys); once its command runs, act(t, job id)."""
    started = tmp_path / "started"
    t = transport(cluster, partition, **extra)
    got: dict[str, object] = {}

    def job() -> None:
        try:
            got["result"] = t.run(f"touch {started}; {command}; echo done", timeout=120)
        except BaseException as err:  # the assertions below say which
            got["error"] = err

    with t:
        worker = threading.Thread(target=job)
        worker.start()
        try:
            wait_for("the job's command never ran", started.exists)
            time.sleep(0.5)  # its first line (the job's id and node) has reached srun
            job_id = t.last_job.job_id or next(j for j in cluster.jobs() if j["name"] == t.last_job.name)["id"]
            act(t, job_id)
        finally:
            worker.join(150)
    assert not worker.is_alive()
    error = got.get("error")
    assert error is None or isinstance(error, Exception), repr(error)
    return t, error, got.get("result")


def srun_pids(t: SlurmTransport) -> list[int]:
    """The job's srun (and the child it forks), not the login shell that started it."""
    needle = f"--job-name={t.last_job.name}"
    return [pid for pid, cmd in processes_matching(needle) if os.path.basename(cmd.split()[0]) == "srun"]


def test_a_step_cancelled_alone_is_infra_not_the_commands_exit_0(cluster: SlurmCluster, tmp_path: Path) -> None:
    """`scancel JOBID.0`: the step's sleep killed, its shell went on to `echo done` and exit 0, the
    job's record COMPLETED: the farm returned exit 0 and "done" from a command Slurm cancelled."""
    t, error, result = run_while(cluster, tmp_path, lambda _, job_id: cluster.cmd(["scancel", f"{job_id}.0"]))
    assert result is None, f"a cancelled step came back as the command's result: {result!r}"
    assert isinstance(error, SlurmCancelled), repr(error)
    assert not error.retryable, "a cancellation is a person's or a policy's: a resubmission would defy it"
    job = t.last_job
    assert f"Slurm job {job.job_id} on t4node was cancelled while it ran" in str(error), str(error)
    # the shell's sleep killed, it may go on to `echo done` and exit 0 (COMPLETED), or die with it (FAILED)
    assert re.search(r"\(its record says (COMPLETED|FAILED)\)", str(error)), str(error)


def test_a_job_signalled_by_scancel_is_infra_not_a_failure(cluster: SlurmCluster, tmp_path: Path) -> None:
    """`scancel --signal=TERM JOBID` terminates the step; the job's record reads FAILED, exit 143:
    the command's own failure, as the farm read it. (Under load the record may already say
    COMPLETED when it is read, the step's "CANCELLED" line beside it: cancelled all the same.)"""
    _, error, result = run_while(cluster, tmp_path, lambda _, job_id: cluster.cmd(["scancel", "--signal=TERM", job_id]))
    assert result is None, f"a signalled job came back as the command's result: {result!r}"
    assert isinstance(error, SlurmCancelled), repr(error)
    said = str(error)
    assert re.search(r"was cancelled while it ran \(its record says (FAILED|COMPLETED)\)", said), said


def test_an_srun_terminated_on_the_login_node_is_infra(cluster: SlurmCluster, tmp_path: Path) -> None:
    """srun sent SIGTERM on the login node forces the step's end ("srun: forcing job termination"):
    exit 137 and FAILED, read as the command killed by SIGKILL."""

    def terminate(t: SlurmTransport, _: str) -> None:
        pids = srun_pids(t)
        assert pids, "the job's srun was not found"
        for pid in pids:
            os.kill(pid, signal.SIGTERM)

    t, error, result = run_while(cluster, tmp_path, terminate)
    assert result is None, f"a terminated srun's job came back as the command's result: {result!r}"
    assert isinstance(error, InfraError) and "was cancelled while it ran" in str(error), repr(error)
    assert any("forcing job termination" in m for m in t.last_job.messages)


def test_the_commands_own_srun_ended_by_its_own_timeout_stays_its_result(cluster: SlurmCluster) -> None:
    """A run whose launcher is `srun` (a step of the farm's job) killed at the run's own `timeout`:
    that srun says "forcing job termination" and slurmstepd cancels its step 1, the command's
    doing, read as the command's result (a timeout verdict), never as Slurm's."""
    with transport(cluster, "t4") as t:
        result = t.run("timeout 3 srun sleep 30; echo rc=$?", timeout=30)
        assert (result.exit_code, result.stdout) == (0, "rc=124\n"), result
        # the command's own srun's words are its stderr, kept off the job's srun's (red-team 250)
        assert "forcing job termination" in result.stderr, result.stderr
        assert not any("forcing job termination" in m for m in t.last_job.messages), t.last_job.messages


def test_a_job_whose_srun_was_killed_is_cancelled_not_left_holding_the_gpu(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """srun SIGKILLed: the farm said "ended in state RUNNING" and went on, the job still RUNNING on
    the compute node, its GPU taken until its time limit, the next cell's job waiting behind it.
    The job's record is waited for 2 s here (20 s in a run, all of it waited out by this test): its
    `sleep 100` keeps it RUNNING past either."""
    monkeypatch.setattr(slurm_transport, "SETTLE_POLLS", 8)

    def kill(t: SlurmTransport, _: str) -> None:
        pids = srun_pids(t)
        assert pids, "the job's srun was not found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)

    t, error, result = run_while(cluster, tmp_path, kill, command="sleep 100")
    name = t.last_job.name

    def gone() -> bool:
        return not [j for j in cluster.jobs(states="PENDING,RUNNING,COMPLETING") if j["name"] == name]

    try:
        assert result is None and isinstance(error, SlurmJobError), repr(error)
        assert "ended in state RUNNING; its srun returned while Slurm still had it: cancelled by the farm" in str(error)
        wait_for("the job outlived its srun, holding its GPU", gone, 30)
    finally:
        cluster.cmd(["scancel", f"--name={name}"], check=False)  # the next test's jobs need its GPU
    (record,) = [j for j in cluster.jobs() if j["name"] == name]
    assert record["state"] == "CANCELLED"


def test_slurmstepds_words_on_the_farms_own_step_only() -> None:
    """What slurmstepd says of the job's step 0 (the farm's) or the job counts; of a step the command
    started itself (its own srun, step 1) it is the command's business."""
    t = SlurmTransport("x", NodeSpec(transport="slurm", partition="p"))
    stamp = "2026-12-05T06:25:51"
    cases = {
        f"*** STEP 12.0 ON n1 CANCELLED AT {stamp} DUE TO TIME LIMIT ***": "reached its Slurm time limit",
        f"*** JOB 12 ON n1 CANCELLED AT {stamp} DUE TO PREEMPTION ***": "was preempted",
        f"*** STEP 12.0 ON n1 CANCELLED AT {stamp} ***": "was cancelled",
    }
    for said, words in cases.items():
        job = SlurmJob(name="farm-x-1", job_id="12", compute_node="n1", started=True, state="COMPLETED")
        job.messages = [f"slurmstepd-n1: error: {said}"]
        with pytest.raises(SlurmJobError, match=f"Slurm job 12 on n1 {words}"):
            t._judge(job, 0, 1.0)
    for said in (
        f"slurmstepd-n1: error: *** STEP 12.1 ON n1 CANCELLED AT {stamp} ***",
        f"slurmstepd-n1: error: *** STEP 120.0 ON n1 CANCELLED AT {stamp} ***",
        "srun: forcing job termination",  # the command's own srun, killed by the command's own timeout
    ):
        own = SlurmJob(name="farm-x-2", job_id="12", compute_node="n1", started=True, state="COMPLETED")
        own.messages = [said]
        t.pinned = None
        t._judge(own, 0, 1.0)  # the command's own step, or another job's: a result


def test_a_cell_whose_job_scancel_signalled_says_slurm_cancelled_it(cluster: SlurmCluster, tmp_path: Path) -> None:
    """At the cell: the run's wrapper never said how it ended, and the cell read "killed, by the kernel
    or the node"; it names Slurm's cancellation and its job now, once, without a resubmission."""
    farm = make_farm(tmp_path, cluster, {"t4": ("t4", {})})
    prefix = f"{tmp_path / 'work-t4'}/cells/"
    signalled: list[str] = []

    def signal_the_kernels_job() -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if [pid for pid, cmd in processes_matching(prefix) if cmd.startswith(prefix)]:
                time.sleep(0.5)
                running = cluster.jobs(states="RUNNING", partition="t4")
                if running:
                    signalled.append(running[0]["id"])
                    cluster.cmd(["scancel", "--signal=TERM", running[0]["id"]])
                    return
            time.sleep(0.1)

    killer = threading.Thread(target=signal_the_kernels_job, daemon=True)
    killer.start()
    summary = run(tmp_path, farm, {("t4", "hang"): None})
    killer.join(5)
    assert signalled, "the hanging kernel's job was never seen running"
    (row,) = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    assert (row["kernel"], row["outcome"], row["failed_stage"]) == (KERNEL, "infra-error", "run"), row["reason"]
    assert f"Slurm job {signalled[0]} on t4node was cancelled while it ran" in row["reason"], row["reason"]
    attempts = query(
        tmp_path / "results.db", "SELECT * FROM attempts WHERE run_id = ? AND kernel IS NOT NULL", summary.run_id
    )
    assert [(a["status"], a["stage"]) for a in attempts] == [("infra", "run")]


def test_a_time_limit_shorter_than_the_commands_own_is_said_and_not_retried(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """`time_limit: 1` (minutes) on a node whose commands may run 120 s: Slurm ends the job (TIMEOUT)
    before the farm's own timeout can, each retry again after a minute, and a hung kernel reads
    infra-error with nothing said of why. Not retried now, and the reason says what to raise.
    The limit is Slurm's own, brought forward: once the command runs its job's end time is set to now
    (`scontrol update EndTime=`, as an operator may), and slurmctld's next time-limit check (every
    30 s) ends it TIMEOUT, as it would at the minute (which cost this test 60 to 90 s)."""

    def end_now(_: SlurmTransport, job_id: str) -> None:
        cluster.cmd(["scontrol", "update", f"JobId={job_id}", "EndTime=now"])

    t, error, result = run_while(cluster, tmp_path, end_now, command="sleep 170", partition="h100", time_limit=1)
    assert result is None and isinstance(error, SlurmTimeLimit), repr(error)
    assert t.last_job.state == "TIMEOUT", t.last_job
    assert not error.retryable, "every attempt runs into the same limit"
    assert "the node's time_limit of 1 min is shorter than the command's own limit of 120 s" in str(error)
    assert "reached its Slurm time limit (TIMEOUT)" in str(error)


def test_a_time_limit_longer_than_the_commands_own_stays_a_passing_fault() -> None:
    """Slurm's TIMEOUT under a limit the command fit in (the farm's default: its timeout + a minute)
    is the cluster's passing trouble, retried as before."""
    t = SlurmTransport("x", NodeSpec(transport="slurm", partition="p", time_limit=5))
    job = SlurmJob(name="farm-x-1", job_id="12", compute_node="n1", started=True, state="TIMEOUT")
    with pytest.raises(SlurmTimeLimit) as err:
        t._judge(job, 0, 1.0)
    from orchestrator.transport.slurm_jobs import within_time_limit

    assert within_time_limit(err.value, 5, 120.0) is err.value and err.value.retryable
    assert within_time_limit(err.value, None, 600.0) is err.value
    assert not within_time_limit(err.value, 1, 120.0).retryable
