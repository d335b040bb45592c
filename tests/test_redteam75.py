"""Red-team round 75: Slurm killing a cell's step for its own reasons, on a real single-host Slurm.

The farm asked for no memory, so each job got the partition's DefMemPerCPU, and a step over it
was killed by Slurm: with OverMemoryKill slurmstepd cancels the step ("exceeded memory limit"),
read as "was cancelled" by someone; with cgroups (ConstrainRAMSpace) the kernel or nvcc dies of
SIGKILL, the job reads OUT_OF_MEMORY, which the farm took for the command's own result (a
kernel's fail, a build-fail). And `scancel --signal=KILL JOBID.0` looks, to srun and squeue, as
the step's shell killing itself does ("task 0: Killed", "Force Terminated StepId=N.0", FAILED):
only accounting's step record ("CANCELLED by UID") tells them apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes import standin_job, write_farm
from slurm import SlurmCluster, running_cluster
from test_slurm import KERNEL, VARIANTS

from orchestrator.config.farm import load_farm
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import ConfigError
from orchestrator.transport.slurm import SlurmCancelled, SlurmJob, SlurmJobError, SlurmTransport
from orchestrator.transport.slurm_ending import read_submission

# 300 MB touched page by page, then a pause for slurmstepd's poll (each second) to see it
HOG = (
    "python3 -c 'import time; b = bytearray(300 << 20); b[::4096] = b\"x\" * (len(b) // 4096); time.sleep(4)'; "
    "echo rc=$?"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    """The test cluster with t4's jobs given 50 MB each by default, enforced (OverMemoryKill)."""
    with running_cluster(cards=None, def_mem_per_cpu={"t4": 50}) as c:
        yield c


def transport(cluster: SlurmCluster, **extra: object) -> SlurmTransport:
    node = NodeSpec(
        transport="slurm",
        partition="t4",
        gres="gpu:1",
        pending_limit=30,
        env={"SLURM_CONF": str(cluster.conf)},
        **extra,
    )
    return SlurmTransport("t4", node)


def test_a_step_over_the_partitions_memory_default_is_infra_naming_the_limit(cluster: SlurmCluster) -> None:
    """slurmstepd kills the step over DefMemPerCPU; the farm said only "was cancelled while it ran"
    (a person's act, as if), never that Slurm's memory limit did it, nor what to set."""
    with transport(cluster) as t, pytest.raises(SlurmJobError) as err:
        t.run(HOG, timeout=60)
    said = str(err.value)
    assert "memory limit" in said and "50M" in said, said
    assert "OUT_OF_MEMORY" in said or "exceeded" in said, said
    assert "`memory`" in said, f"the reason does not say what to set: {said}"
    assert not err.value.retryable, "a retry asks for the same memory and is killed the same way"
    assert not isinstance(err.value, SlurmCancelled), "no one cancelled it: Slurm's limit did"


def test_the_nodes_memory_is_passed_as_mem(cluster: SlurmCluster) -> None:
    """A node's `memory` is each job's --mem: the same command then runs to its end."""
    t = transport(cluster, memory="1000M")
    assert "--mem=1000M" in t.srun_arguments("farm-x", 60)
    with t:
        result = t.run(HOG, timeout=60)
    assert (result.exit_code, result.stdout) == (0, "rc=0\n"), result


def test_memory_is_validated_at_load(tmp_path: Path) -> None:
    assert NodeSpec(transport="slurm", partition="p", memory="16G").memory == "16G"
    bad = {
        "word": {"transport": "slurm", "partition": "t4", "memory": "lots"},
        "ssh": {"transport": "ssh", "host": "h", "memory": "16G"},
        "twice": {"transport": "slurm", "partition": "t4", "memory": "16G", "slurm_options": ["--mem-per-cpu=2G"]},
    }
    for name, entry in bad.items():
        path = write_farm(tmp_path / name, {name: entry}, [standin_job(KERNEL, VARIANTS)])
        with pytest.raises(ConfigError) as err:
            load_farm(path)
        assert f"nodes.{name}" in str(err.value) and "memory" in str(err.value), str(err.value)


def judged(state: str, messages: list[str], rc: int = 137) -> SlurmJobError | None:
    t = SlurmTransport("x", NodeSpec(transport="slurm", partition="p"))
    job = SlurmJob(name="farm-x-1", job_id="12", compute_node="n1", started=True, state=state)
    job.memory = "2G"  # what the job's record said it had (squeue %m)
    job.messages = messages
    try:
        t._judge(job, rc, 1.0)
    except SlurmJobError as err:
        return err
    return None


CGROUP_OOM = [
    "slurmstepd-n1: error: Detected 1 oom-kill event(s) in StepId=12.0. Some of your processes may have been "
    "killed by the cgroup out-of-memory handler.",
    "srun: error: n1: task 0: Out Of Memory",
]


def test_a_cgroup_oom_kill_is_infra_not_the_commands_result() -> None:
    """task/cgroup with ConstrainRAMSpace: the kernel (or nvcc) dies of SIGKILL, its shell goes on, the
    job reads OUT_OF_MEMORY: a RESULT_STATE, the kernel's fail or a build-fail (Slurm's words as kept)."""
    for state in ("OUT_OF_MEMORY", "FAILED", "COMPLETED"):
        err = judged(state, CGROUP_OOM, rc=1)
        assert err is not None, f"{state}: an OOM kill by Slurm came back as the command's result"
        assert not err.retryable
        assert "memory limit" in str(err) and "2G" in str(err) and "`memory`" in str(err), str(err)
    # the command's own srun's step (a launcher) is under the same job's limit
    err = judged("OUT_OF_MEMORY", [m.replace("12.0", "12.1") for m in CGROUP_OOM], rc=1)
    assert err is not None and "memory limit" in str(err)
    assert judged("FAILED", ["srun: error: n1: task 0: Exited with exit code 1"], rc=1) is None


def test_the_job_records_memory_is_read() -> None:
    """squeue's %m and sacct's ReqMem name the limit the job had."""
    job = SlurmJob(name="farm-x-1")
    text = "@@slurm-start-ab 12 n1 T4, 7.5;\nout\n\n@@slurm-end-ab 137\n@@slurm-job-ab 12|OUT_OF_MEMORY|n1|None|50M\n"
    assert read_submission("x", job, "ab", text) == ("out\n", 137)
    assert (job.state, job.memory) == ("OUT_OF_MEMORY", "50M")


def test_a_step_killed_by_someones_scancel_names_them() -> None:
    """`scancel --signal=KILL 12.0`: srun says "task 0: Killed" and "Force Terminated StepId=12.0", the
    record FAILED, as when the step's shell is killed by its own command; accounting's step record
    says "CANCELLED by UID" only for the former (sacct -j 12.0 -o JobID,State)."""
    t = SlurmTransport("x", NodeSpec(transport="slurm", partition="p"))
    words = "@@slurm-start-ab 12 n1 T4, 7.5;\n\n@@slurm-end-ab 137\n@@slurm-job-ab 12|FAILED|n1|JobLaunchFailure|\n"
    killed = ["srun: error: n1: task 0: Killed", "srun: Force Terminated StepId=12.0"]
    job = SlurmJob(name="farm-x-1")
    read_submission("x", job, "ab", words + "@@slurm-step-ab 12.0|CANCELLED by 1234\n")
    job.messages = list(killed)
    with pytest.raises(SlurmCancelled) as err:
        t._judge(job, 137, 1.0)
    assert "uid 1234" in str(err.value) and not err.value.retryable, str(err.value)
    # the step's own death by a signal: sacct says CANCELLED, by no one; the command's result
    own = SlurmJob(name="farm-x-2")
    read_submission("x", own, "ab", words + "@@slurm-step-ab 12.0|CANCELLED\n")
    own.messages = list(killed)
    t._judge(own, 137, 1.0)
