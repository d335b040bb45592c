"""Red-team round 98: an unusual or faulty Slurm cluster under the farm, on a real single-host Slurm.

1. A cluster whose Epilog (a GPU health check, a scrub of /tmp) outlasts 20 s keeps every job
   COMPLETING after its srun returned: the farm took each for a job Slurm "still had", cancelled it,
   and made every command (the probe first) infra-error; the partition was unusable.
2. A TaskProlog that says something ("print ..." lines: a message of the day) writes to the job's
   stdout before the farm's start line: every job "ended before its command started", though its
   command ran (and was run again by each retry).
3. slurmctld unreachable (restarting, failing over) at submission: "Slurm refused" the job, not
   retried, as a request the partition can never meet.
4. `--clusters`/`-M` in slurm_options sent the jobs to another cluster while the farm's squeue,
   sacct and scancel asked the login node's own: no record read, and a stop or the next start's
   reap cancelled nothing (jobs left behind).
5. A job asking more time than the partition's MaxTime waits the whole pending limit for nothing
   (srun: "Requested nodes are busy"): the reason now says the time asked is over the partition's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm import SlurmCluster, missing_tools, tool

import orchestrator.transport.slurm as slurm_transport
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.transport.slurm import SlurmJobError, SlurmPendingLimit, SlurmRejected, SlurmTransport


class OddCluster(SlurmCluster):
    """The test cluster with an Epilog whose length (seconds) is read from a file at each job's end."""

    def _write_files(self) -> None:
        super()._write_files()
        self.epilog_seconds = self.root / "epilog-seconds"
        self.epilog_seconds.write_text("0\n")
        epilog = self.root / "epilog"
        epilog.write_text(f"#!/bin/sh\nsleep $(cat {self.epilog_seconds})\n")
        epilog.chmod(0o755)
        self.conf.write_text(self.conf.read_text() + f"Epilog={epilog}\n")

    def restart_controller(self, down: float) -> None:
        ctld = self.procs.pop("slurmctld")
        ctld.terminate()
        ctld.wait(30)
        time.sleep(down)
        self._spawn("slurmctld", [str(tool("slurmctld")), "-D", "-f", str(self.conf)])
        deadline = time.monotonic() + 60
        while self.cmd(["scontrol", "ping"], check=False).returncode != 0:
            assert time.monotonic() < deadline, "slurmctld did not come back"
            time.sleep(0.3)
        self.wait_idle(60)


@pytest.fixture(scope="module")
def cluster() -> Iterator[OddCluster]:
    missing = missing_tools()
    if missing:  # never a skip: a CI without Slurm must go red
        pytest.fail(f"Slurm tests need {', '.join(missing)}; run scripts/setup.sh --test (as root)")
    c = OddCluster(cards=None)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def transport(cluster: SlurmCluster, **extra: object) -> SlurmTransport:
    entry: dict[str, object] = {
        "transport": "slurm",
        "partition": "t4",
        "gres": "gpu:1",
        "pending_limit": 30,
        "env": {"SLURM_CONF": str(cluster.conf)},
    }
    entry.update(extra)
    return SlurmTransport("t4", NodeSpec(**entry))


def test_a_long_epilog_is_waited_for_not_taken_for_a_job_slurm_still_ran(
    cluster: OddCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job stays COMPLETING through the Epilog; its command ended, its result is the command's."""
    monkeypatch.setattr(slurm_transport, "SETTLE_POLLS", 4)  # 1 s, where the Epilog takes 5
    cluster.epilog_seconds.write_text("5\n")
    try:
        with transport(cluster) as t:
            result = t.run("echo ran; exit 3", timeout=30)
            assert (result.exit_code, result.stdout) == (3, "ran\n"), result
            assert t.last_job.state == "FAILED", t.last_job
            assert t.last_compute_node == "t4node"
    finally:
        cluster.epilog_seconds.write_text("0\n")
        cluster.wait_idle()


def test_an_epilog_outlasting_the_jobs_budget_leaves_only_sruns_word(
    cluster: OddCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Still COMPLETING when the login side must answer: Slurm's final record is not there yet, as
    with no record at all; the command's own result stands (never a cancel of a finished job), and
    Slurm's own words (a cancel) still make it infra-error."""
    monkeypatch.setattr(slurm_transport, "SETTLE_POLLS", 4)
    monkeypatch.setattr(slurm_transport, "SUBMIT_MARGIN", 14.0)  # the login side's budget: 2 + 2 + 14 s
    # past the COMPLETING wait's end (the budget less its 8 s: 10 s after submission), with 4 s to spare
    cluster.epilog_seconds.write_text("14\n")
    try:
        with transport(cluster, pending_limit=2) as t:
            result = t.run("echo ran; exit 4", timeout=2)
            assert (result.exit_code, result.stdout) == (4, "ran\n"), result
            assert t.last_job.state == "COMPLETING"
    finally:
        cluster.epilog_seconds.write_text("0\n")
        cluster.wait_idle(60)
    t = SlurmTransport("x", NodeSpec(transport="slurm", partition="p"))
    job = slurm_transport.SlurmJob(name="farm-x-1", job_id="9", compute_node="n1", started=True, state="COMPLETING")
    job.messages = ["slurmstepd-n1: error: *** JOB 9 ON n1 CANCELLED AT 2026-11-29T13:30:02 ***"]
    with pytest.raises(SlurmJobError, match="CANCELLED"):
        t._judge(job, 143, 0.5)


def test_a_task_prologs_words_before_the_start_line_are_not_the_command_s(cluster: OddCluster) -> None:
    prolog = cluster.root / "taskprolog"
    original = prolog.read_text()
    prolog.write_text(original + 'echo "print Welcome to the farm cluster: be nice"\n')
    try:
        with transport(cluster) as t:
            result = t.run("echo hi", timeout=30)
    finally:
        prolog.write_text(original)
    assert (result.exit_code, result.stdout) == (0, "hi\n"), result
    assert t.last_job.started and t.last_compute_node == "t4node"
    assert any("Welcome to the farm cluster" in m for m in t.last_job.messages), t.last_job.messages


def test_an_unreachable_controller_is_a_passing_fault_not_a_refusal(cluster: OddCluster, tmp_path: Path) -> None:
    """Figure: slurmctld stopped, a job submitted: a retryable SlurmJobError naming the controller,
    not a refusal. The farm's commands read a copy of the cluster's slurm.conf with MessageTimeout=3
    (Slurm's 10 s, the window in which a command retries an unreachable controller, took 22 s of CI)."""
    impatient = tmp_path / "slurm.conf"
    impatient.write_text(cluster.conf.read_text() + "MessageTimeout=3\n")
    ctld = cluster.procs.pop("slurmctld")
    ctld.terminate()
    ctld.wait(30)
    cluster.procs["slurmctld"] = ctld  # restart_controller pops it again
    try:
        with (
            transport(cluster, pending_limit=3, env={"SLURM_CONF": str(impatient)}) as t,
            pytest.raises(SlurmJobError) as err,
        ):
            t.run("echo never", timeout=10)
    finally:
        cluster.restart_controller(0)
    said = str(err.value)
    assert not isinstance(err.value, SlurmRejected), said
    assert err.value.retryable, f"slurmctld coming back is what a retry waits for: {said}"
    assert "controller" in said and "refused" not in said, said


@pytest.mark.parametrize("option", ["--clusters=gpu", "--cluster=gpu", "-M", "-Mgpu", "-vMgpu"])
def test_slurm_options_that_send_jobs_to_another_cluster_are_refused(option: str) -> None:
    with pytest.raises(ValueError, match="cluster"):
        NodeSpec(transport="slurm", partition="t4", slurm_options=[option])


def test_more_time_than_the_partition_allows_says_so(cluster: OddCluster) -> None:
    with transport(cluster, pending_limit=2, time_limit=120) as t, pytest.raises(SlurmPendingLimit) as err:
        t.run("echo never", timeout=30)
    said = str(err.value)
    assert "PartitionTimeLimit" in said, said
    assert "MaxTime" in said and "120 min" in said and "time_limit" in said, said
