"""Red-team round 214: the Slurm transport when slurmctld does not answer for a finished job's record.

The login side read a job's record once, with squeue's errors thrown away: a squeue that failed (a
busy or restarting slurmctld: "Socket timed out on send/recv operation") read as "Slurm keeps no
record of it" (a short MinJobAge), and the farm judged the job by srun's exit alone. What only the
record says was lost: a job Slurm suspended while it ran, whose `timeout` fired on its resume, came
back as the command's own exit 124 (a kernel's timeout verdict for the cluster's doing). Now a failed
squeue is asked again, 1 s apart, for slurm_query.QUERY_WINDOW s. A squeue that never answers still
leaves srun's word (red-team 87's rule: tests/test_redteam87.py), and an unreachable controller is
asked once (red-team 98): the round's first version made that an infra-error, and six tries of a
controller's message timeout outran the command's budget.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_slurm
from slurm import SlurmCluster
from test_slurm import transport

from orchestrator.transport.slurm import SlurmJobError, SlurmTransport

cluster = test_slurm.cluster  # a cluster of this module's own


@pytest.fixture
def failing_squeue(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A squeue first on the login shell's PATH that fails as a busy slurmctld's does while the file
    it returns holds a count above 0 (taking one off) or `always`; else the real squeue."""
    real = shutil.which("squeue")
    assert real
    shim = tmp_path / "bin"
    shim.mkdir()
    count = tmp_path / "failures"
    count.write_text("0")
    (shim / "squeue").write_text(
        f'#!/bin/sh\nn=$(cat {count}); if [ "$n" != always ] && [ "$n" -le 0 ]; then exec {real} "$@"; fi\n'
        f'[ "$n" = always ] || echo $((n-1)) > {count}\n'
        'echo "squeue: error: Socket timed out on send/recv operation" >&2; exit 1\n'
    )
    (shim / "squeue").chmod(0o755)
    yield count, {"PATH": f"{shim}:{os.environ['PATH']}"}


def login_with(cluster: SlurmCluster, partition: str, env: dict[str, str]) -> SlurmTransport:
    entry = cluster.farm_entry(partition, Path("/tmp"), "nvcc")
    return transport(cluster, partition, env={**entry["env"], **env})  # type: ignore[dict-item]


def test_a_suspended_job_whose_first_record_query_failed_is_infra(
    cluster: SlurmCluster, failing_squeue: tuple[Path, dict[str, str]]
) -> None:
    """Before: squeue's one failure after the job ended made the record None, and a job Slurm
    suspended for 4 s (its `timeout 3` firing on resume) came back as the command's exit 124.
    Figure: squeue asked again, the record read, the job's suspension an InfraError."""
    count, env = failing_squeue
    count.write_text("1")
    errors: list[BaseException] = []
    results: list[object] = []

    def job() -> None:
        try:
            with login_with(cluster, "t4", env) as t:
                results.append(t.run("timeout 3 sleep 8; echo status=$?", timeout=30))
        except BaseException as err:
            errors.append(err)

    worker = threading.Thread(target=job)
    worker.start()
    deadline = time.monotonic() + 20
    while not (running := [j for j in cluster.jobs(states="RUNNING", partition="t4") if j["name"].startswith("farm-")]):
        assert time.monotonic() < deadline, "the job never ran"
        time.sleep(0.1)
    time.sleep(0.5)
    cluster.cmd(["scontrol", "suspend", running[0]["id"]])
    time.sleep(4)
    cluster.cmd(["scontrol", "resume", running[0]["id"]])
    worker.join(60)
    assert not worker.is_alive()
    assert count.read_text().strip() == "0", "squeue was never asked for the job's record"
    assert not results, f"a suspended job's exit read as the command's: {results}"
    (err,) = errors
    assert isinstance(err, SlurmJobError) and "was suspended by Slurm" in str(err), err
    assert err.job.state is not None, "the record was read"
