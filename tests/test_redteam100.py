"""Red-team round 100: the Slurm transport's leftovers of rounds 98 and 99, on a real single-host Slurm.

1. A node's `env:` (a license token) went on the SSH commands' stdin in round 99, but the Slurm
   transport still wrote it into the login node's shell's command line in front of srun, squeue
   and scancel: that shell lives for the whole job, its pending time included, on a login node
   every user of the cluster shares (`ps`, /proc/PID/cmdline).
2. A stop (and the clean-up of a killed run) found the run's jobs by `squeue -u "$(id -un)"`: where
   the farm's uid has no name on the login node (an LDAP outage, a container's uid), `id -un` fails
   and the stop cancelled nothing.
3. `SLURM_CLUSTERS` in a node's `env:` sends srun, squeue and scancel to another cluster, but not
   sacct, whose fallback record then came from the login node's own cluster.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes import query, standin_job, standin_variant, write_farm
from slurm import SlurmCluster, running_cluster
from test_slurm import cancelled_job, nvcc
from test_verdicts import run

from orchestrator.config.farm import load_farm
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import ConfigError
from orchestrator.transport.slurm import SlurmTransport


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with running_cluster() as c:
        yield c


def test_a_slurm_nodes_env_values_are_on_no_command_line(cluster: SlurmCluster, tmp_path: Path) -> None:
    """The whole cell (probe, staging, build, run) through Slurm, /proc/*/cmdline read all along:
    the value is on none, and the kernel gets it as it was written, quotes and all."""
    secret = "tok" + secrets.token_hex(8)
    value = f'{secret} it\'s 100% \\ "$HOME" `x`'
    prelude = tmp_path / "show.sh"
    # in hex: the value itself is shown as *** in the output the farm keeps (round 105)
    prelude.write_text('printf "VALUE<%s>" "$VENDOR_TOKEN" | od -An -tx1 | tr -d " \\n"; echo; sleep 1\n')
    variant = standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=prelude)
    entry = cluster.farm_entry("t4", tmp_path / "work", nvcc())
    entry["env"] = {**entry["env"], "VENDOR_TOKEN": value}  # type: ignore[dict-item]
    config = write_farm(tmp_path, {"t4": entry}, [standin_job("standin", {"v": variant})])
    seen: list[str] = []
    done = threading.Event()

    def look() -> None:
        while not done.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                with contextlib.suppress(OSError):
                    if secret.encode() in cmdline.read_bytes():
                        seen.append(f"{cmdline}: {cmdline.read_bytes()[:300]!r}")
            time.sleep(0.02)

    watcher = threading.Thread(target=look)
    watcher.start()
    try:
        _, summary = run(config)
    finally:
        done.set()
        watcher.join()
    assert summary.outcomes == {"pass": 1}, summary.outcomes
    (row,) = query(tmp_path / "results.db", "SELECT stdout, slurm_job_id FROM results")
    assert row["slurm_job_id"], "the cell ran as a Slurm job"
    assert f"VALUE<{value}>".encode().hex().encode() in bytes(row["stdout"]), bytes(row["stdout"])
    assert not seen, seen


def nameless_id(folder: Path) -> Path:
    """An `id` as on a login node whose passwd lookups fail for the farm's uid (nss/LDAP down, a
    container's uid): the uid itself is known, its name is not. A real nameless uid cannot be had
    here: this one host is also the slurmctld, which must know the job's user to run it."""
    real = shutil.which("id")
    assert real
    folder.mkdir()
    shim = folder / "id"
    shim.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" -un "*|*" -nu "*|*" -n "*) '
        f'echo "id: cannot find name for user ID $({real} -u)" >&2; exit 1;; esac\n'
        f'exec {real} "$@"\n'
    )
    shim.chmod(0o755)
    return folder


def test_a_stop_cancels_the_runs_jobs_where_the_uid_has_no_name(cluster: SlurmCluster, tmp_path: Path) -> None:
    shim = nameless_id(tmp_path / "bin")
    token = secrets.token_hex(8)
    entry = cluster.farm_entry("t4", Path("/tmp"), "nvcc")
    entry.pop("workdir")
    submitting = SlurmTransport("t4", NodeSpec(**entry), run_token=token)
    entry["env"] = {**entry["env"], "PATH": f"{shim}:{os.environ['PATH']}"}  # type: ignore[dict-item]
    stopping = SlurmTransport("t4", NodeSpec(**entry))
    with submitting, stopping:
        # the shim is what the stop's shell meets: the node's PATH, as its every command's
        said = stopping.run("id -un; id -u", timeout=30)
        assert (said.exit_code, said.stdout.strip()) == (0, str(os.getuid())), said
        assert "cannot find name" in said.stderr, said
        job = threading.Thread(target=cancelled_job, args=(submitting,), daemon=True)
        job.start()
        deadline = time.monotonic() + 60
        while not [j for j in cluster.jobs(states="RUNNING") if token in j["name"]]:
            assert time.monotonic() < deadline, "the job never ran"
            time.sleep(0.2)
        try:
            assert stopping.stop_run(token, 30) == 1
        finally:
            job.join(60)
            if job.is_alive():  # never left holding the partition for the other tests
                cluster.cmd(["scancel", f"--user={cluster.user}"], check=False)
    (record,) = [j for j in cluster.jobs() if token in j["name"]]
    assert record["state"] == "CANCELLED", record


@pytest.mark.parametrize("name", ["SLURM_CLUSTERS"])
def test_slurm_clusters_in_a_nodes_env_is_refused_at_load(tmp_path: Path, name: str) -> None:
    entry = {"transport": "slurm", "partition": "t4", "env": {name: "gpu2", "SLURM_CONF": "/etc/slurm/slurm.conf"}}
    job = standin_job("standin", {"v": standin_variant("PASS", {"min": "7.5"})})
    config = write_farm(tmp_path, {"gpu": entry}, [job])
    with pytest.raises(ConfigError) as err:
        load_farm(config)
    said = str(err.value)
    assert str(config) in said and "nodes.gpu.env" in said and name in said, said
    assert "sacct" in said and "SLURM_CONF" in said, said  # why, and what to do instead
    # an ssh node's own jobs (a kernel's own srun) are not the farm's business
    NodeSpec(transport="ssh", host="h", env={name: "gpu2"})
