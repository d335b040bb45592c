"""Red-team round 173: the PostgreSQL store under server trouble, failing first.

1. A run whose end's commit the server refused (a restart or a DBA's lock as the run ended) stopped
   with exit 5, "this run's records are in its journal: farm import JOURNAL"; every cell was stored,
   only the end was not, and that import was refused ("its run is already in ... as run N"): it took a
   journal's end only with a result added. The run stayed "running" until the next start marked it
   aborted, "the farm was stopped", its green verdict lost by the farm's own remedy.
2. A run refused the advisory lock named as its holder whichever farm on the *server* held the farm's
   key first, another database's too (advisory locks are per database): on a server of several
   courses' databases the message sent the operator to another course's farm host.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.pool import NullPool
from test_redteam87 import RUN
from test_store_backends import (  # noqa: F401 (fixtures)
    _drop_postgres_database,
    _new_postgres_database,
    postgres_admin,
    postgres_url,
    result_record,
)

from orchestrator.errors import LockError, StoreError
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.lock import ADVISORY_KEY, DatabaseLock
from orchestrator.store.tables import ResultRow, Run


def test_a_run_whose_end_the_server_refused_is_finished_by_its_journals_import(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
) -> None:
    """Before: `farm import JOURNAL` refused "already in" and the run stayed running, then aborted.
    Figure: the import takes the journal's end; the run reads finished, exit 0, both cells kept."""
    url = f"{postgres_url}?options=-c%20statement_timeout%3D500"  # the site's statement timeout: 0.5 s
    store = Store(url)
    store.journal = Journal(tmp_path / "journal", "ee")
    planned = [("k", "v1", "n", ""), ("k", "v2", "n", "")]
    run_id = store.begin_run(planned=planned, host="a", config_file="farm.yaml", token="ee", **RUN)
    store.add_result(result_record(run_id, None, 1))
    store.add_result(result_record(run_id, None, 2))
    other = create_engine(postgres_url, poolclass=NullPool)
    try:
        with other.connect() as dba:  # a DBA's maintenance holds the runs table as the run ends
            dba.execute(text("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE"))
            with pytest.raises(StoreError, match="farm import"):
                store.finish_run(run_id, "finished", 0)  # journaled, not stored
            dba.rollback()
    finally:
        other.dispose()
    store.journal.close()
    store.close()
    after = Store(postgres_url)  # the import the error said to run, before any other start
    try:
        imported = after.import_journal(tmp_path / "journal" / "ee.jsonl")
        assert (imported.run_id, imported.status, imported.results) == (run_id, "finished", 0), imported
        assert "its end" in imported.note, imported.note
        with after.engine.connect() as db:
            run = db.execute(select(Run.status, Run.exit_code).where(Run.id == run_id)).one()
            rows = db.execute(select(ResultRow.variant, ResultRow.outcome).where(ResultRow.run_id == run_id)).all()
        assert tuple(run) == ("finished", 0), run
        assert sorted(rows) == [("v1", "pass"), ("v2", "pass")], rows
        with pytest.raises(StoreError, match="already in"):  # nothing more to take from it
            after.import_journal(tmp_path / "journal" / "ee.jsonl")
    finally:
        after.close()


def test_a_refused_lock_names_the_holder_of_its_own_database(
    postgres_url: str,  # noqa: F811
    postgres_admin: Engine,  # noqa: F811
) -> None:
    """Before: both databases' refusals named one holder, the other database's farm for one of them.
    Figure: each refusal names the farm that holds that database's lock."""
    name, neighbour = _new_postgres_database(postgres_admin, "rt173")
    holders = {postgres_url: "farm pid 11 on course-a-host", neighbour: "farm pid 22 on course-b-host"}
    engines = [
        create_engine(url, poolclass=NullPool, connect_args={"application_name": who}) for url, who in holders.items()
    ]
    try:
        held = [engine.connect() for engine in engines]
        for connection in held:
            assert connection.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": ADVISORY_KEY}).scalar()
            connection.commit()
        for url, who in holders.items():
            with pytest.raises(LockError) as info, DatabaseLock(url, 0):
                pass
            said = str(info.value)
            assert who in said, said
            assert all(other not in said for other in holders.values() if other != who), said
        for connection in held:
            connection.close()
    finally:
        for engine in engines:
            engine.dispose()
        _drop_postgres_database(postgres_admin, name)
