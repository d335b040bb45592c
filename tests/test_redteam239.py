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
