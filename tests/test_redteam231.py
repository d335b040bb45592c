"""Red-team 231: the Slurm transport's stuck-job watch, on a real single-host Slurm.

1. Every job after the probe is pinned to the probed compute node (--nodelist). A pinned job behind
   another job also waiting for that busy node (the farm's own next cell where build_jobs > 2, or any
   other user's) pends with "ReqNodeNotAvail, UnavailableNodes:NODE": Slurm keeps the node for the job
   ahead. The watch of red-team 221 took every ReqNodeNotAvail for a node drained or down, cancelled
   the job after STUCK_SECONDS and made the cell infra-error, not retried, "which Slurm does not
   resolve by itself", though the node was only busy. Now a node reason counts as stuck only while a
   node it names (else the job's requested node, else its partition's every node) is down, drained,
   draining, failing or in maintenance, by sinfo.
2. A login node whose non-interactive shell has no srun on its PATH (Slurm's bin folder added by a
   login profile only) made every job "Slurm's controller (slurmctld) did not answer for the job's
   record (squeue: sh: 1: squeue: not found)", retried each cell after 8 s of squeue retries: the night
   operator was sent to slurmctld. Now NodeUnusable (not retried) saying to set PATH in the node's env.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm import SlurmCluster, running_cluster, tool

import orchestrator.transport.slurm as slurm_transport
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import InfraError, NodeUnusable
from orchestrator.transport.slurm import SlurmStuck, SlurmTransport


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with running_cluster(cards=None, shared={"mixed": ["t4", "h100"]}) as c:
        yield c


@pytest.fixture(autouse=True)
def quick_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_transport, "STUCK_SECONDS", 2.0)
    monkeypatch.setattr(slurm_transport, "STUCK_POLL_S", 0.5)


def transport(cluster: SlurmCluster, partition: str = "t4", pending_limit: int = 40, **env: str) -> SlurmTransport:
    node = NodeSpec(
        transport="slurm",
        partition=partition,
        gres="gpu:1",
        pending_limit=pending_limit,
        env={"SLURM_CONF": str(cluster.conf), **env},
    )
    return SlurmTransport(partition, node)


def running(cluster: SlurmCluster, name: str) -> bool:
    return any(j["name"] == name for j in cluster.jobs(states="RUNNING"))


@pytest.mark.parametrize("partition", ["t4", "mixed"])
def test_a_pinned_job_behind_another_waiting_for_its_busy_node_waits_and_runs(
    cluster: SlurmCluster, partition: str
) -> None:
    """Before: behind a job waiting for the busy pinned node, the farm's job said "Nodes required for
    job are DOWN, DRAINED or reserved for jobs in higher priority partitions" (a partition of one node)
    or "ReqNodeNotAvail, UnavailableNodes:NODE" (of two), and was cancelled as stuck within seconds
    (SlurmStuck, "does not resolve by itself"). Figure: it waits while the node is busy and runs once
    the jobs ahead have ended."""
    srun = tool("srun") or "srun"
    with transport(cluster, partition) as t:
        assert t.run("echo probe", timeout=20).stdout.strip() == "probe"  # the probe pins its node
        pinned = t.pinned
        assert pinned
        holder = subprocess.Popen(
            [srun, "-p", partition, "--gres=gpu:1", "-w", pinned, "-J", "holder231", "sleep", "8"], env=cluster.env
        )
        waiter = None
        try:
            while not running(cluster, "holder231"):
                assert holder.poll() is None, "the holder job never ran"
                time.sleep(0.1)
            # another user's job, pinned too, ahead of the farm's in the queue
            waiter = subprocess.Popen(
                [srun, "-p", partition, "--gres=gpu:1", "-w", pinned, "-J", "waiter231", "sleep", "1"], env=cluster.env
            )
            time.sleep(1.5)
            reasons: list[str] = []

            def watch() -> None:  # what Slurm said of the farm's job while it pended
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    reasons.extend(j["reason"] for j in cluster.jobs(states="PENDING") if j["name"].startswith("farm-"))
                    time.sleep(0.5)

            seen = threading.Thread(target=watch, daemon=True)
            seen.start()
            clock = time.monotonic()
            try:
                result = t.run("echo ran", timeout=20)
            except SlurmStuck as err:
                pytest.fail(f"a job waiting for its busy node was cancelled as stuck: {err}")
            waited = time.monotonic() - clock
            seen.join()
        finally:
            cluster.cmd(["scancel", "--name=holder231"], check=False)
            cluster.cmd(["scancel", "--name=waiter231"], check=False)
            holder.wait(30)
            if waiter is not None:
                waiter.wait(30)
    # the case this test is about: Slurm's words for a node it keeps for the job ahead
    assert any(r.startswith(("ReqNodeNotAvail", "Nodes required")) for r in reasons), reasons
    assert result.stdout.strip() == "ran" and result.exit_code == 0, result
    assert waited > 3, waited
    cluster.wait_idle()


def test_a_pinned_job_whose_node_is_drained_is_still_stuck(cluster: SlurmCluster) -> None:
    """The fix keeps red-team 221's rule for a drained pinned node: cancelled within seconds, naming
    Slurm's reason, not left for its pending limit."""
    with transport(cluster, pending_limit=30) as t:
        assert t.run("echo probe", timeout=20).stdout.strip() == "probe"
        cluster.cmd(["scontrol", "update", "NodeName=t4node", "State=DRAIN", "Reason=rt231"])
        try:
            clock = time.monotonic()
            with pytest.raises(SlurmStuck) as err:
                t.run("echo never", timeout=10)
            waited = time.monotonic() - clock
        finally:
            cluster.cmd(["scontrol", "update", "NodeName=t4node", "State=RESUME"])
            cluster.wait_idle()
    assert waited < 20 and "does not resolve" in str(err.value), (waited, str(err.value))


def test_a_login_shell_without_srun_on_its_path_says_so_not_slurmctld(cluster: SlurmCluster, tmp_path: Path) -> None:
    """Before: SlurmJobError, retried, "Slurm's controller (slurmctld) did not answer for the job's
    record (squeue: sh: 1: squeue: not found)". Figure: NodeUnusable, not retried, naming srun and the
    node's PATH, not slurmctld."""
    bin_dir = tmp_path / "bin"  # the shell's own tools, none of Slurm's
    bin_dir.mkdir()
    for name in ("sh", "sed", "cut", "tail", "sleep", "id", "date", "tr", "timeout", "cat", "grep"):
        if found := shutil.which(name):
            (bin_dir / name).symlink_to(found)
    with transport(cluster, PATH=str(bin_dir)) as t, pytest.raises(InfraError) as err:
        t.run("echo never", timeout=20)
    said = str(err.value)
    assert isinstance(err.value, NodeUnusable) and not err.value.retryable, said
    assert "srun" in said and "PATH" in said and "slurmctld" not in said, said
