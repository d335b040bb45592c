"""Review 145: the last two sessions' changes (948caa9..1e9bccb), read for trust holes.

Before/after:
1. `farm import` completing a run the database still holds running (one restored from a copy
   taken before another farm's start closed it) took the finish its farm journaled after that
   start's closing mark: the run read finished, exit 0, where a rebuild of the same journal
   (rebuilding.py, review 142) reads it aborted, as the database that closed it does. Nothing
   after the mark counts, its finish included: the run is aborted at the close.
"""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select
from test_review136 import _begun, _closed, _lost

from orchestrator.errors import FarmError
from orchestrator.store.database import Store
from orchestrator.store.tables import Run


def _copy(tmp_path: Path) -> None:
    """copy.db: results.db as it stands now (its WAL included), a copy to restore."""
    source, target = sqlite3.connect(tmp_path / "results.db"), sqlite3.connect(tmp_path / "copy.db")
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()


def _status(url: str, run_id: int) -> tuple[str, int | None]:
    store = Store(url, create=False)
    try:
        with store.engine.connect() as db:
            row = db.execute(select(Run.status, Run.exit_code).where(Run.id == run_id)).one()
            return row[0], row[1]
    finally:
        store.close()


def test_completing_takes_no_finish_journaled_after_the_closing_mark(tmp_path: Path) -> None:
    url, store, first = _begun(tmp_path)  # v1 passed
    _lost(store, first, timedelta(0))  # v2 passed, journaled, its commit refused
    _copy(tmp_path)  # the run still running there
    # another farm's start: v2 taken from the journal (review 185), then the mark
    assert _closed(url, tmp_path / "journal") == [(first, 0)]
    with contextlib.suppress(FarmError):
        store.finish_run(first, "finished", 0)  # journaled after the mark
    store.journal.close()
    store.close()
    restored = f"sqlite:///{tmp_path / 'copy.db'}"
    assert _status(restored, first) == ("running", None)
    after = Store(restored, create=False)
    try:
        done = after.import_journal(tmp_path / "journal" / "aa.jsonl")
    finally:
        after.close()
    assert done[:3] == (first, "aborted", 1), done  # v2, journaled before the mark, is taken
    assert _status(restored, first) == ("aborted", None)


def test_completing_keeps_a_finish_journaled_before_any_mark(tmp_path: Path) -> None:
    """The guard's other side: no mark, the journal's own finish stands."""
    _url, store, first = _begun(tmp_path)
    _lost(store, first, timedelta(0))
    _copy(tmp_path)
    store.finish_run(first, "finished", 0)
    store.journal.close()
    store.close()
    restored = f"sqlite:///{tmp_path / 'copy.db'}"
    after = Store(restored, create=False)
    try:
        assert after.import_journal(tmp_path / "journal" / "aa.jsonl")[1:3] == ("finished", 1)
    finally:
        after.close()
    assert _status(restored, first) == ("finished", 0)
