"""Red-team round 87: PostgreSQL restarts and Slurm's words under a run, failing first.

1. A run whose PostgreSQL lock session the server ended (a restart, idle_session_timeout) took the
   advisory lock again at its next write whenever it was free (round 50). A second farm host that
   ran a whole run in between (taking the free lock, marking the live run aborted with its cells
   not-run, storing its own run, releasing the lock) went unnoticed: the first run went on
   writing into a run the database had closed as aborted, and ended it "finished", green over
   the other host's not-run rows, the lock's purpose defeated in silence.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.pool import NullPool
from test_redteam50 import farm_on
from test_store_backends import (  # noqa: F401 (fixtures)
    postgres_admin,
    postgres_url,
)

from orchestrator.errors import StoreError
from orchestrator.store import lock
from orchestrator.store.database import Store
from orchestrator.store.location import server_identity
from orchestrator.store.lock import run_lock
from orchestrator.store.records import AttemptRecord
from orchestrator.store.tables import Run

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
                    assert b.abort_unfinished_runs() == [(mine, 1)]
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
