"""Review round 188: no write of a run lands in a run the database no longer holds as running.

A farm whose PostgreSQL run-lock session was lost (a server restart) writes on for up to
lock.CHECK_EVERY after another farm's start closed its run; that start completes the closed run
from its journal (review 185), so a result journaled before the start read the journal and
committed after it was stored twice. Each write of a run now reads the run's status in its own
transaction (FOR SHARE on PostgreSQL, which waits for the closing start's row lock) and stops the
run's writes for good where another farm closed it; the closing start locks the runs it closes
before it reads their journals.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool
from test_redteam87 import RUN
from test_store_backends import (  # noqa: F401 (fixtures)
    postgres_admin,
    postgres_url,
    result_record,
)

from orchestrator.errors import StoreError
from orchestrator.store import lock, recovery
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.lock import DatabaseLock
from orchestrator.store.records import AttemptRecord, SnapshotRecord
from orchestrator.store.tables import ResultRow, Run

STOPS = "run lock .* was lost .* this run stops writing"


def _live(url: str, folder: Path, token: str) -> tuple[Store, int]:
    store = Store(url)
    store.journal = Journal(folder, token)
    run_id = store.begin_run(planned=[("k", "v1", "n", "")], host="a", config_file="f", token=token, **RUN)
    return store, run_id


def _closed_after_journaling(store: Store, other: Store, folder: Path) -> None:
    """The other farm's start closes the run right after the live store journals its next write
    and before that write's transaction: its lock check skipped (CHECK_EVERY not yet past)."""
    assert store.journal is not None
    write_many = store.journal.write_many

    def journaled(records: list) -> None:
        write_many(records)
        store.journal.write_many = write_many  # type: ignore[union-attr,method-assign]
        other.abort_unfinished_runs(folder)

    store.journal.write_many = journaled  # type: ignore[method-assign]


def _rows(url: str) -> tuple[list[tuple[str, str]], list[tuple[str, int | None]]]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as db:
            results = [tuple(r) for r in db.execute(select(ResultRow.variant, ResultRow.outcome).order_by("id"))]
            runs = [tuple(r) for r in db.execute(select(Run.status, Run.exit_code))]
    finally:
        engine.dispose()
    return results, runs


def test_a_result_journaled_before_another_farms_start_is_not_stored_twice_sqlite(tmp_path: Path) -> None:
    """Before: two pass rows for the one cell (the start's, from the journal, and the live farm's
    commit after it). Figure: the start closes the run between the live result's journal write and
    its transaction; that transaction refuses ("the run lock ... was lost ... stops writing"), one row."""
    url, folder = f"sqlite:///{tmp_path / 'results.db'}", tmp_path / "journal"
    store, run_id = _live(url, folder, "sqlite0001")
    other = Store(url)
    _closed_after_journaling(store, other, folder)
    with pytest.raises(StoreError, match=STOPS):
        store.add_result(result_record(run_id, None, 1))
    results, runs = _rows(url)
    assert results == [("v1", "pass")]
    assert runs == [("aborted", None)]
    other.close()
    store.close()


@pytest.fixture
def held_lock_unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock, "CHECK_EVERY", 3600.0)  # the live farm's lock check skipped meanwhile


def _cut(admin: Engine, held: DatabaseLock) -> None:
    """The server ends the lock's session (as a restart does), unseen by the run."""
    with admin.connect() as db:
        db.execute(text("SELECT pg_terminate_backend(:p)"), {"p": held._backend})


def test_a_result_journaled_before_another_farms_start_is_not_stored_twice_postgres(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    postgres_admin: Engine,  # noqa: F811
    held_lock_unchecked: None,
) -> None:
    """Before: two pass rows of the cell. Figure: the live farm's lock session ended by the server,
    another farm takes the lock and its start closes the run (taking the journaled result) before
    the live farm's commit; that commit is refused, one row; and the live farm's later writes and
    its end too, for good: the run stays aborted."""
    folder = tmp_path / "journal"
    with DatabaseLock(postgres_url, 0) as held:
        store, run_id = _live(postgres_url, folder, "pg0001")
        _cut(admin=postgres_admin, held=held)
        with DatabaseLock(postgres_url, 5):
            other = Store(postgres_url)
            _closed_after_journaling(store, other, folder)
            with pytest.raises(StoreError, match=STOPS):
                store.add_result(result_record(run_id, None, 1))
            other.close()
        tried = AttemptRecord(run_id=run_id, node="n", kernel="k", variant="v2", attempt=1, status="ok")
        with pytest.raises(StoreError, match=STOPS):
            store.add_attempt(tried)
        with pytest.raises(StoreError, match=STOPS):
            store.add_snapshot(SnapshotRecord(run_id=run_id, node="n", transport="ssh", address="n:22"))
        with pytest.raises(StoreError, match=STOPS):
            store.finish_run(run_id, "finished", 0)
        store.close()
    results, runs = _rows(postgres_url)
    assert results == [("v1", "pass")]
    assert runs == [("aborted", None)]


def test_the_runs_own_end_after_another_farms_close_does_not_overwrite_it(tmp_path: Path) -> None:
    """Before: the run read finished, exit 0, over the close (its cell not-run). Figure: another
    farm's start closed the run; the live farm's end is refused and the close stands."""
    url, folder = f"sqlite:///{tmp_path / 'results.db'}", tmp_path / "journal"
    store, run_id = _live(url, folder, "end0001")
    other = Store(url)
    other.abort_unfinished_runs(folder)
    with pytest.raises(StoreError, match=STOPS):
        store.finish_run(run_id, "finished", 0)
    results, runs = _rows(url)
    assert results == [("v1", "not-run")]
    assert runs == [("aborted", None)]
    other.close()
    store.close()


@pytest.fixture
def engine_of(postgres_url: str) -> Iterator[Engine]:  # noqa: F811
    engine = create_engine(postgres_url, poolclass=NullPool)
    yield engine
    engine.dispose()


def test_a_write_waits_for_the_closing_starts_row_lock_then_refuses(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    engine_of: Engine,
    held_lock_unchecked: None,
) -> None:
    """Before: the live farm's result, waiting on the start's lock of the run row, landed in the run
    once the start committed it aborted. Figure: the start locks the row and closes it while the
    write waits; the write then reads the run aborted and refuses: no row."""
    store, run_id = _live(postgres_url, tmp_path / "journal", "wait0001")
    with engine_of.connect() as start:
        start.execute(text("SELECT id FROM runs WHERE id = :i FOR UPDATE"), {"i": run_id})
        failed: list[BaseException] = []

        def write() -> None:
            try:
                store.add_result(result_record(run_id, None, 1))
            except BaseException as err:  # told to the test below
                failed.append(err)

        writer = threading.Thread(target=write)
        writer.start()
        writer.join(1.0)
        assert writer.is_alive()  # it waits on the start's row lock
        start.execute(text("UPDATE runs SET status = 'aborted' WHERE id = :i"), {"i": run_id})
        start.commit()
    writer.join(10)
    assert len(failed) == 1 and isinstance(failed[0], StoreError), failed
    assert "this run stops writing" in str(failed[0])
    assert _rows(postgres_url)[0] == []
    store.close()


def test_the_closing_start_locks_the_run_before_it_reads_its_journal(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    held_lock_unchecked: None,
) -> None:
    """Before: two pass rows. The start read the journal and added its result while the run row
    stood unlocked: the live farm's commit of that result landed before the start's. Figure: the
    live write (journaled) goes on while the start completes the run; it waits for the start and
    is refused: one row."""
    folder = tmp_path / "journal"
    store, run_id = _live(postgres_url, folder, "order0001")
    assert store.journal is not None
    journaled, go = threading.Event(), threading.Event()
    write_many = store.journal.write_many

    def pausing(records: list) -> None:
        write_many(records)
        journaled.set()
        go.wait(10)

    store.journal.write_many = pausing  # type: ignore[method-assign]
    failed: list[BaseException] = []

    def write() -> None:
        try:
            store.add_result(result_record(run_id, None, 1))
        except BaseException as err:  # told to the test below
            failed.append(err)

    writer = threading.Thread(target=write)
    writer.start()
    assert journaled.wait(10)
    never_finished = recovery.never_finished

    def meanwhile(*args: object) -> object:
        go.set()
        writer.join(1.5)  # the live write's commit, where nothing holds it back
        return never_finished(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(recovery, "never_finished", meanwhile)
    other = Store(postgres_url)
    other.abort_unfinished_runs(folder)
    writer.join(10)
    assert len(failed) == 1 and "this run stops writing" in str(failed[0]), failed
    assert _rows(postgres_url)[0] == [("v1", "pass")]
    other.close()
    store.close()
