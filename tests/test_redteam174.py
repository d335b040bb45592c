"""Red-team round 174: a Slurm job suspended under the farm, a refusal that named no request, and a
job record that aged out of squeue across midnight, on a real single-host Slurm (tests/slurm.py).

1. A job Slurm suspended while it ran (`scontrol suspend`, a partition's PreemptMode=SUSPEND or gang
   scheduling) stops every process of it, the farm's `timeout` guard's included, whose wall-clock
   timer runs on: resumed, the guard kills the kernel at once, exit 124 past its limit, and the run
   stage reads that as the kernel's own timeout (a hang verdict for a kernel that ran seconds), its
   record COMPLETED. Slurm's record tells (its run time leaves the suspension out): infra-error now.
2. A job refused for a request the cluster cannot meet ("Invalid generic resource (gres)
   specification", "Requested node configuration is not available") named the partition but not
   what was asked: the node's `gres`, `constraint`, `memory` are named now.
3. sacct without -S looks from today's midnight: a job whose squeue record was purged (a short
   MinJobAge) and that ended before midnight had no record after it: only srun's words judged it
   (a suspension, accounting's "CANCELLED by UID" unread). Tested against the real sacct's parsing
   (the cluster keeps no accounting): no stand-in sacct.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest
import test_slurm
from slurm import SlurmCluster
from test_slurm import transport

from orchestrator.transport.slurm import SlurmJobError, SlurmRejected

cluster = test_slurm.cluster  # a cluster of this module's own


def test_a_job_slurm_suspended_mid_run_is_infra_not_the_commands_timeout(cluster: SlurmCluster) -> None:
    """Before: the command `timeout 4 sleep 60` (the run stage's guard around a kernel) in a job
    suspended 6 s after 1 s came back exit 124 after 7 s, a COMPLETED job's result: the kernel's
    timeout. Figure: SlurmJobError naming the suspension, retryable."""
    got: dict[str, object] = {}
    t = transport(cluster, "t4")

    def job() -> None:
        try:
            got["result"] = t.run("timeout 4 sleep 60; echo rc=$?", timeout=30)
        except BaseException as err:
            got["error"] = err

    with t:
        worker = threading.Thread(target=job)
        worker.start()
        deadline = time.monotonic() + 15
        while not (running := [j for j in cluster.jobs("RUNNING") if j["partition"] == "t4"]):
            assert time.monotonic() < deadline, "the job never ran"
            time.sleep(0.1)
        time.sleep(1)
        cluster.cmd(["scontrol", "suspend", running[0]["id"]])
        time.sleep(6)
        cluster.cmd(["scontrol", "resume", running[0]["id"]])
        worker.join(30)
    err = got.get("error")
    assert isinstance(err, SlurmJobError), f"taken for the command's own: {got.get('result')}"
    assert "suspended by Slurm for" in str(err) and "not a verdict" in str(err), err
    assert err.retryable and err.job.compute_node == "t4node"


def test_a_refused_request_names_what_the_node_asked_for(cluster: SlurmCluster) -> None:
    """Before: "Slurm refused Slurm job farm-t4-... for partition 't4' (srun: error: Invalid generic
    resource (gres) specification)": which of the node's keys, and what value, unsaid. Figure: the
    node's gres (and constraint) named with their values."""
    with transport(cluster, "t4", gres="fpga:1") as t, pytest.raises(SlurmRejected) as err:
        t.run("echo never", timeout=10)
    assert "gres 'fpga:1'" in str(err.value), err.value
    with transport(cluster, "t4", gres="gpu:a100:1", constraint="nvlink") as t, pytest.raises(SlurmRejected) as err:
        t.run("echo never", timeout=10)
    assert "gres 'gpu:a100:1'" in str(err.value) and "constraint 'nvlink'" in str(err.value), err.value


def test_the_record_query_asks_sacct_past_midnight_in_words_the_real_sacct_takes(cluster: SlurmCluster) -> None:
    """sacct by name alone lists jobs since today's midnight: the fallback asks a week back. Before: no
    -S. Figure: the query asks `-S now-7days`, which the cluster's real sacct parses (a time it cannot
    read it refuses: "Invalid time specification", as the guard shows)."""
    from orchestrator.transport.slurm_query import record_query

    assert "sacct -X -n -P -S now-7days --name=" in record_query("farm-x-1", "t", 4)
    env = {**os.environ, "SLURM_CONF": str(cluster.conf)}

    def said(start: str) -> str:
        done = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-S", start, "--name=farm-x-1", "-o", "JobID,State,Start,End,Elapsed"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=False,
        )
        return done.stdout + done.stderr

    assert "Invalid time specification" in said("now-7fortnights")  # the guard: a time sacct cannot read
    assert "Invalid time specification" not in said("now-7days"), said("now-7days")


def test_a_records_suspended_seconds_are_read_from_squeue_and_sacct_formats() -> None:
    """Before: no field read. Figure: span less run time; a record without a span or a run time, none."""
    from orchestrator.transport.slurm_jobs import SlurmJob, read_records

    cases = {
        "7|COMPLETED|n1|None|0|2026-01-01T23:59:00|2026-01-02T00:00:10|0:05": 65,  # squeue's %M
        "7|FAILED|n1|None|0|2026-01-01T00:00:00|2026-01-02T01:00:00|1-00:59:58": 2,  # sacct's Elapsed
        "7|COMPLETED|n1|None|0|2026-01-01T00:00:00|2026-01-01T00:00:09|0:09": 0,
        "7|COMPLETED|n1|None|0|Unknown|Unknown|INVALID": 0,
        "7|RUNNING|n1|None|0|2026-01-01T00:00:00|2026-01-01T01:00:00|0:09": 0,  # %e: its time limit's end
    }
    for line, expected in cases.items():
        job = SlurmJob(name="farm-x-1")
        read_records(job, "t", f"@@slurm-job-t {line}\n")
        assert job.suspended == expected, line
