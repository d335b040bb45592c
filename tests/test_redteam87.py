"""Red-team round 87: PostgreSQL restarts and Slurm's words under a run, failing first.

1. A run whose PostgreSQL lock session the server ended (a restart, idle_session_timeout) took the
   advisory lock again at its next write whenever it was free (round 50). A second farm host that
   ran a whole run in between (taking the free lock, marking the live run aborted with its cells
   not-run, storing its own run, releasing the lock) went unnoticed: the first run went on
   writing into a run the database had closed as aborted, and ended it "finished", green over
   the other host's not-run rows, the lock's purpose defeated in silence.
2. A Slurm job whose record could not be read (squeue timing out on a busy slurmctld, a short
   MinJobAge, no accounting): every srun or slurmstepd line naming a cancellation made it infra,
   the command's own srun's step too. A run launching its kernel with `srun` under its own
   `timeout` (a hung kernel, the command's verdict) read as Slurm's doing, where the same job with
   its record read is the command's result (round 64): only the farm's step 0, or the job, counts.
3. A result whose commit the server refused (a statement timeout behind another session's lock, a
   restart) stopped the run "this run's records are in its journal: farm import JOURNAL"; that
   import was refused ("its run is already in the database"), and the next start recorded the
   cell not-run: the journal's verdict lost, the farm's own remedy refusing it. An import now
   completes a run the database holds with the journal's results it lacks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import test_slurm
from slurm import SlurmCluster
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.pool import NullPool
from test_redteam50 import farm_on
from test_slurm import transport
from test_store_backends import (  # noqa: F401 (fixtures)
    postgres_admin,
    postgres_url,
    result_record,
)

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import StoreError
from orchestrator.store import lock
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.location import server_identity
from orchestrator.store.lock import run_lock
from orchestrator.store.records import AttemptRecord
from orchestrator.store.tables import ResultRow, Run
from orchestrator.transport.slurm import SlurmJob, SlurmJobError, SlurmTransport

cluster = test_slurm.cluster  # a Slurm cluster of this module's own, started as test_slurm starts its own
RUN = {"trigger": "cron", "farm_version": "0", "selection": "--all"}


def _end_lock_session(admin: Engine) -> None:
    """What a server restart does to the run lock's session: ends it."""
    with admin.connect() as db:
        ended = db.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE :me"),
            {"me": f"farm pid {os.getpid()} %"},
        ).all()
    assert ended == [(True,)]


def test_a_run_whose_lock_another_farm_took_and_released_meanwhile_stops_writing(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    postgres_admin: Engine,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lock, "CHECK_EVERY", 0.0)  # every write checks its lock
    config = farm_on(tmp_path, postgres_url)
    with run_lock(postgres_url, tmp_path, 0):
        store = Store(postgres_url)
        try:
            mine = store.begin_run(
                planned=[("toy", "plain", "here", "T4")], host="a", config_file=str(config), token="aa", **RUN
            )
            _end_lock_session(postgres_admin)
            # host B, while the lock is free: a whole run of its own (this process's lock set aside,
            # as host B's process never had it)
            held = lock._HELD.pop(server_identity(postgres_url))
            other = create_engine(postgres_url, poolclass=NullPool)
            try:
                with other.connect() as host_b:
                    assert host_b.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": lock.ADVISORY_KEY}).scalar()
                    b = Store(postgres_url)
                    assert [a[:2] for a in b.abort_unfinished_runs()] == [(mine, 1)]
                    theirs = b.begin_run(host="b", config_file=str(config), token="bb", **RUN)
                    b.finish_run(theirs, "finished", 0)
                    b.close()
            finally:
                other.dispose()  # host B's session ends: the lock is free again
                lock._HELD[server_identity(postgres_url)] = held
            with pytest.raises(StoreError, match="another farm"):
                store.add_attempt(AttemptRecord(run_id=mine, node="here", attempt=1, status="ok"))
            with pytest.raises(StoreError, match="another farm"):
                store.finish_run(mine, "finished", 0)
            with store.engine.connect() as db:
                assert db.scalar(select(Run.status).where(Run.id == mine)) == "aborted"
        finally:
            store.close()


def test_the_commands_own_srun_step_cancelled_stays_its_result_without_slurms_record(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """squeue and sacct not answering (a busy slurmctld, no accounting): the job's record unread."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("squeue", "sacct"):
        fake = folder / tool
        said = "slurm_load_jobs error: Socket timed out on send/recv operation"
        fake.write_text(f"#!/bin/sh\necho '{said}' >&2\nexit 1\n")
        fake.chmod(0o755)
    env = {"SLURM_CONF": str(cluster.conf), "PATH": f"{folder}:{os.environ['PATH']}"}
    with transport(cluster, "t4", env=env) as t:
        result = t.run("timeout 3 srun sleep 30; echo rc=$?", timeout=60)
        assert t.last_job is not None and t.last_job.state is None, t.last_job  # Slurm's record unread
        # the command's own srun's words are its stderr, kept off the job's srun's (red-team 250)
        assert any(".1 ON" in m and "CANCELLED" in m for m in result.stderr.splitlines()), result.stderr
        assert (result.exit_code, result.stdout) == (0, "rc=124\n"), result


def test_without_slurms_record_the_farms_step_and_the_job_still_count() -> None:
    """Only the command's own steps (N.1, N.2...) are left out: Slurm's words on step 0, on the job, on
    another job's step or on none named still make the job infra."""
    t = SlurmTransport("x", NodeSpec(transport="slurm", partition="p"))
    stamp = "2026-12-06T00:14:18"
    own = f"slurmstepd-n1: error: *** STEP 12.1 ON n1 CANCELLED AT {stamp} ***"
    for said in (
        f"slurmstepd-n1: error: *** STEP 12.0 ON n1 CANCELLED AT {stamp} ***",
        f"slurmstepd-n1: error: *** JOB 12 ON n1 CANCELLED AT {stamp} DUE TO PREEMPTION ***",
        f"slurmstepd-n1: error: *** STEP 12.extern ON n1 CANCELLED AT {stamp} ***",
        f"slurmstepd-n1: error: *** STEP 120.1 ON n1 CANCELLED AT {stamp} ***",
        "srun: error: Node failure on n1",
    ):
        job = SlurmJob(name="farm-x-1", job_id="12", compute_node="n1", started=True)
        job.messages = [own, said]
        t.pinned = None
        with pytest.raises(SlurmJobError, match="ended abnormally"):
            t._judge(job, 0, 1.0)
    job = SlurmJob(name="farm-x-2", job_id="12", compute_node="n1", started=True)
    job.messages = [own, "srun: error: n1: task 0: Exited with exit code 124"]
    t.pinned = None
    t._judge(job, 0, 1.0)  # the command's own step: its result


def test_a_result_whose_commit_the_server_refused_is_imported_into_its_run(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
) -> None:
    url = f"{postgres_url}?options=-c%20statement_timeout%3D500"  # the site's statement timeout: 0.5 s
    store = Store(url)
    store.journal = Journal(tmp_path / "journal", "cc")
    run_id = store.begin_run(
        planned=[("k", "v1", "n", ""), ("k", "v2", "n", "")], host="a", config_file="farm.yaml", token="cc", **RUN
    )
    store.add_result(result_record(run_id, None, 1))
    other = create_engine(postgres_url, poolclass=NullPool)
    try:
        with other.connect() as dba:  # a DBA's maintenance holds the results table past the timeout
            dba.execute(text("LOCK TABLE results IN ACCESS EXCLUSIVE MODE"))
            with pytest.raises(StoreError, match="farm import"):
                store.add_result(result_record(run_id, None, 2))  # the cell's verdict: journaled, not stored
            dba.rollback()
    finally:
        other.dispose()
    store.journal.close()
    store.close()
    after = Store(postgres_url)  # the next start, then the import the error said to run
    try:
        assert [a[:2] for a in after.abort_unfinished_runs()] == [(run_id, 1)]
        assert after.import_journal(tmp_path / "journal" / "cc.jsonl")[0] == run_id
        with after.engine.connect() as db:
            rows = db.execute(select(ResultRow.variant, ResultRow.outcome).where(ResultRow.run_id == run_id)).all()
        assert sorted(rows) == [("v1", "pass"), ("v2", "pass")], rows
        with pytest.raises(StoreError, match="already in"):  # nothing more to take from it
            after.import_journal(tmp_path / "journal" / "cc.jsonl")
    finally:
        after.close()
