"""Review 142: `farm import` and another farm's close of the run (session 36's leftovers), against
a real SQLite file, real journals and the store's own functions.

Before/after:
1. A journal holding the closing mark (store/closing.py: another farm's start closed the run and
   killed what it ran on the nodes) imported into a database that lacks the run (a fresh one, a
   rebuild after a lost disk) was rebuilt whole: a result journaled after the mark (a kernel that
   start's reap killed: its crash) became the cell's verdict, and the run took the finish its farm
   journaled after the close. Now nothing after the mark is a verdict: the cell is not-run, saying
   why, and the run is aborted, as the database that closed it says.
2. Completing a run whose journal holds no closing mark goes by two hosts' clocks; the results it
   took so were counted like any other ("imported ... (aborted, 1 results)"): the import's line now
   says they were taken by the clocks.
"""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from test_review136 import _begun, _closed, _lost
from test_store_backends import result_record

from orchestrator.errors import FarmError, StoreError
from orchestrator.report.no_verdict import _cause  # type: ignore[attr-defined]
from orchestrator.store.database import Store
from orchestrator.store.journal import read
from orchestrator.store.tables import ResultRow, Run


def _cells(url: str) -> dict[str, tuple[str, str]]:
    store = Store(url, create=False)
    try:
        with store.engine.connect() as db:
            rows = db.execute(select(ResultRow.variant, ResultRow.outcome, ResultRow.reason)).all()
            return {variant: (outcome, reason) for variant, outcome, reason in rows}
    finally:
        store.close()


def test_a_rebuild_takes_nothing_journaled_after_the_closing_mark(tmp_path: Path) -> None:
    url, store, first = _begun(tmp_path)  # v1 passed, before the close
    assert _closed(url, tmp_path / "journal") == [(first, 1)]
    killed = dataclasses.replace(result_record(first, None, 2), outcome="fail", reason="killed by signal 9")
    with pytest.raises(StoreError, match="this run stops writing"):  # journaled after the mark, refused
        store.add_result(killed)  # that start's reap killed the kernel
    with contextlib.suppress(FarmError):  # its farm finishes (the database may refuse: it closed the run)
        store.finish_run(first, "finished", 1)
    store.journal.close()
    store.close()
    kinds = [kind for kind, _ in read(tmp_path / "journal" / "aa.jsonl")]
    assert kinds.index("closed") < kinds.index("result", kinds.index("closed")) < kinds.index("finish"), kinds
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    rebuilt = Store(fresh, create=True)
    try:
        run_id, status, results, note = rebuilt.import_journal(tmp_path / "journal" / "aa.jsonl")
    finally:
        rebuilt.close()
    assert (status, results) == ("aborted", 1)
    assert "1 results journaled after another farm's start closed the run not taken" in note, note
    cells = _cells(fresh)
    assert cells["v1"][0] == "pass"
    outcome, reason = cells["v2"]
    assert outcome == "not-run", cells
    assert "closed the run" in reason and "killed by signal 9" not in reason, reason
    assert _cause(reason)[0] == "aborted", reason  # the index: not the node's doing
    check = Store(fresh, create=False)
    try:
        with check.engine.connect() as db:
            assert db.scalar(select(Run.status).where(Run.id == run_id)) == "aborted"
    finally:
        check.close()


def test_a_rebuild_keeps_a_finish_journaled_before_any_mark(tmp_path: Path) -> None:
    """The guard's other side: no mark, the journal's own finish stands."""
    _url, store, first = _begun(tmp_path)
    store.add_result(result_record(first, None, 2))
    store.finish_run(first, "finished", 0)
    store.journal.close()
    store.close()
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    rebuilt = Store(fresh, create=True)
    try:
        assert rebuilt.import_journal(tmp_path / "journal" / "aa.jsonl")[1:3] == ("finished", 2)
    finally:
        rebuilt.close()


def test_completing_by_the_clocks_says_so_in_the_import_line(tmp_path: Path) -> None:
    url, store, first = _begun(tmp_path)
    _lost(store, first, timedelta(0))  # stamped before the close
    store.journal.close()
    store.close()
    assert _closed(url, None) == [(first, 1)]  # no mark: that start could not reach the journal
    after = Store(url)
    try:
        done = after.import_journal(tmp_path / "journal" / "aa.jsonl")
    finally:
        after.close()
    assert done[:3] == (first, "aborted", 1)
    assert "by the clocks" in done.note and "no closing mark" in done.note, done
    (tmp_path / "marked").mkdir()
    url2, store2, first2 = _begun(tmp_path / "marked")
    _lost(store2, first2, timedelta(0))
    store2.journal.close()
    store2.close()
    # a start that reaches the journal takes v2 itself, before its mark (review 185): no clocks asked
    assert _closed(url2, tmp_path / "marked" / "journal") == [(first2, 0)]
    after = Store(url2)
    try:
        with pytest.raises(StoreError, match="already in"):
            after.import_journal(tmp_path / "marked" / "journal" / "aa.jsonl")
    finally:
        after.close()
