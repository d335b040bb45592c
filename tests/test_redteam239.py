"""Red-team round 239: the run's journal and `farm import`, against real SQLite files, real
journals and the store's own functions."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from test_review136 import _begun, _lost
from test_store_backends import result_record

from orchestrator.errors import StoreError
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.tables import ResultRow, Run

RUN = {"trigger": "cron", "farm_version": "0", "selection": "--all", "host": "a", "config_file": "farm.yaml"}


def _outcomes(store: Store, run_id: int) -> dict[str, str]:
    with store.engine.connect() as db:
        rows = db.execute(select(ResultRow.variant, ResultRow.outcome).where(ResultRow.run_id == run_id)).all()
    return dict(rows)


def test_a_rebuild_takes_no_result_journaled_after_the_runs_own_end(tmp_path: Path) -> None:
    """Before: a run that ended itself (aborted, exit 5), then a worker's pass of v2 journaled after
    that end (its commit refused: the run no longer open). The next start's completion turned it away
    ("journaled after the run's own end", review 186), but `farm import` of the same journal into a
    fresh database stored it: v2 pass, a verdict no run of the farm stood by. Figure: the rebuild
    takes nothing after the run's own finish; v2 is not-run and the import's line says so."""
    _url, store, first = _begun(tmp_path)  # v1 passed
    store.finish_run(first, "aborted", 5)
    _lost(store, first, timedelta(0))  # v2 journaled after the end, refused
    assert store.journal is not None
    store.journal.close()
    store.close()
    fresh = Store(f"sqlite:///{tmp_path / 'fresh.db'}", create=True)
    try:
        run_id, status, results, note = fresh.import_journal(tmp_path / "journal" / "aa.jsonl")
        assert (status, results) == ("aborted", 1), (status, results, note)
        assert _outcomes(fresh, run_id) == {"v1": "pass", "v2": "not-run"}
        assert "after the run's own end" in note, note
    finally:
        fresh.close()


def _tokenless_journal(tmp_path: Path) -> Path:
    """A finished run of one passing cell whose run record holds no token (an older farm's)."""
    store = Store(f"sqlite:///{tmp_path / 'lost.db'}", create=True)
    store.journal = Journal(tmp_path / "journal", "0123456789ab")
    run_id = store.begin_run(planned=[("k", "v1", "n", "")], token=None, **RUN)
    store.add_result(result_record(run_id, None, 1))
    store.finish_run(run_id, "finished", 0)
    store.journal.close()
    store.close()
    return store.journal.path


def test_a_journal_without_a_token_imported_again_is_refused(tmp_path: Path) -> None:
    """Before: a journal whose run record has no token (an older farm's, or one with its token
    emptied) was looked up by nothing: imported a second time (a second `farm import` of the night's
    journals) it was stored again as a new run, its start equal to the newest's passing the order
    check: two runs, each pass counted twice. Figure: the second import is refused, "already in"."""
    path = _tokenless_journal(tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'results.db'}", create=True)
    try:
        first, status, results, _note = store.import_journal(path)
        assert (status, results) == ("finished", 1)
        with pytest.raises(StoreError, match=f"already in .* as run {first}"):
            store.import_journal(path)
        with store.engine.connect() as db:
            assert db.scalar(select(func.count()).select_from(Run)) == 1
    finally:
        store.close()


def test_a_result_of_a_cell_the_run_never_planned_is_refused_naming_the_record(tmp_path: Path) -> None:
    """Before: a journal edited by hand (or spliced from another run's), a `result` record added for
    a cell its run never planned (v3: the line of v1's pass, its variant changed), was imported
    without a word: v3 pass stored in the run, certified green on the matrix, though no cell v3 was
    ever scheduled. Figure: the journal is refused whole, naming the file, the record, the cell and
    what the farm writes (a result of a cell its run planned); nothing stored."""
    _url, store, first = _begun(tmp_path)  # planned v1 and v2; v1 passed
    store.add_result(result_record(first, None, 2))
    store.finish_run(first, "finished", 0)
    assert store.journal is not None
    store.journal.close()
    store.close()
    path = tmp_path / "journal" / "aa.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    v1 = next(line for line in lines if line.startswith('{"kind":"result"') and '"variant":"v1"' in line)
    forged = v1.replace('"variant":"v1"', '"variant":"v3"')
    path.write_text("".join(lines[:-1]) + forged + lines[-1])  # before the finish, as a run writes it
    number = len(lines)  # the forged record's line
    fresh = Store(f"sqlite:///{tmp_path / 'fresh.db'}", create=True)
    try:
        with pytest.raises(StoreError) as refused:
            fresh.import_journal(path)
        said = str(refused.value)
        assert f"{path}: record {number} (result)" in said and "k:v3 on n" in said, said
        assert "never planned" in said, said
        with fresh.engine.connect() as db:
            assert db.scalar(select(func.count()).select_from(Run)) == 0
    finally:
        fresh.close()
