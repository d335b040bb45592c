"""Review round 186: review 185's start that completes a stopped run from its journal, against a
real SQLite file, real journals and the store's own functions.

Before/after:
1. The start now also takes runs that ended aborted with exit 5 and left planned cells without
   results. Such runs from before review 185 (every full disk, every server gone past store_wait
   in a farm's history) were all taken at the first start after the upgrade, however many runs
   came after, and each missing cell got a not-run row with a new, highest result id. The
   standing takes a cell's highest id as its latest: a later run's pass of the cell stood under
   the old run's not-run ("infra since" on the matrix). Now a cell a later run has a result of
   gets no not-run row (as completing.py's own _rerun_later guard for verdicts).
2. A run that ended itself (its own end, exit 5) was judged as if another farm's start had closed
   it: a journaled result stamped after the run's own end (the host's clock stepped back between
   the two) was refused as "ended after another farm's start closed the run ... which killed what
   it ran on the nodes", and the start then wrote the cell not-run, saying nothing of the verdict
   its journal held. No start closed it and nothing was killed: what the journal holds before the
   run's own end (the order of its appends, which cannot step) is taken.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlalchemy import select
from test_review136 import _begun, _lost
from test_store_backends import result_record

from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.tables import ResultRow

RUN = {"trigger": "cron", "farm_version": "0", "selection": "--all", "host": "a", "config_file": "farm.yaml"}


def _outcomes(store: Store, run_id: int) -> dict[str, str]:
    with store.engine.connect() as db:
        rows = db.execute(select(ResultRow.variant, ResultRow.outcome).where(ResultRow.run_id == run_id)).all()
    return dict(rows)


def test_an_old_stopped_runs_not_run_rows_never_stand_over_a_later_runs_result(tmp_path: Path) -> None:
    """Before: run 1 (exit 5, cell v2 never stored) and run 2 (v2 passed), then the first start
    after the upgrade: run 1's v2 got a not-run row of the highest id, and the standing's latest
    result of v2 was run 1's not-run. Figure: the standing as of run 2 says v2's latest is run 2's."""
    url, store, first = _begun(tmp_path)
    store.finish_run(first, "aborted", 5)  # v2's commit refused (a full disk): its own end, exit 5
    store.journal.close()
    store.journal = Journal(tmp_path / "journal", "bb")
    second = store.begin_run(planned=[("k", "v2", "n", "")], token="bb", **RUN)
    store.add_result(result_record(second, None, 2))
    store.finish_run(second, "finished", 0)
    store.journal.close()
    store.close()
    later = Store(url)
    try:
        aborted = later.abort_unfinished_runs(tmp_path / "journal")
        _verdicts, latest = later.standing(second)
        assert latest[("k", "v2", "n", "")].run_id == second, (aborted, latest)
        assert _outcomes(later, second) == {"v2": "pass"}
    finally:
        later.close()


def test_a_run_that_ended_itself_keeps_a_verdict_stamped_after_its_end(tmp_path: Path) -> None:
    """Before: v2's result (stamped an hour ahead: the host's clock stepped back before the run's
    end) was refused as late against the run's own end, silently; v2 was stored not-run "the run
    stopped (exit 5)". Figure: the start takes v2 (pass) from the journal and says so."""
    url, store, first = _begun(tmp_path)
    _lost(store, first, timedelta(hours=1))  # journaled, its commit refused
    store.finish_run(first, "aborted", 5)
    store.journal.close()
    store.close()
    later = Store(url)
    try:
        (aborted,) = later.abort_unfinished_runs(tmp_path / "journal")
        assert (aborted.added, aborted.not_run, aborted.exit_code) == (1, 0, 5), aborted
        assert _outcomes(later, first) == {"v1": "pass", "v2": "pass"}
        assert "1 result its database lacked taken from its journal" in aborted.said(), aborted.said()
    finally:
        later.close()


def test_a_result_journaled_after_the_runs_own_end_is_refused_and_said(tmp_path: Path) -> None:
    """The guard's other side: a result journaled after the run's own end is no verdict of the run;
    the start does not take it, and its line says so (it said nothing of results not taken)."""
    url, store, first = _begun(tmp_path)
    store.finish_run(first, "aborted", 5)
    _lost(store, first, timedelta(0))  # journaled after the finish
    store.journal.close()
    store.close()
    later = Store(url)
    try:
        (aborted,) = later.abort_unfinished_runs(tmp_path / "journal")
        assert (aborted.added, aborted.not_run) == (0, 1), aborted
        assert "journaled after the run's own end" in aborted.said(), aborted.said()
    finally:
        later.close()


def test_a_start_reads_stopped_runs_whose_cells_are_all_stored_in_one_query(tmp_path: Path) -> None:
    """Before: every start loaded each exit-5 run's planned cells and results, for good (a run whose
    cells were all stored is done with, but was looked at again at every start): 5,000 such runs
    cost 1.0 s a start, 2.4 s where later runs re-ran their cells (measured on SQLite). Figure: 40
    such runs, the start's statements do not grow with them (one query narrows to runs with work)."""
    from sqlalchemy import event

    url, store, first = _begun(tmp_path)
    store.finish_run(first, "aborted", 5)
    store.journal = None
    for _ in range(40):
        run_id = store.begin_run(planned=[("k", "v1", "n", "")], **RUN)
        store.add_result(result_record(run_id, None, 1))
        store.finish_run(run_id, "aborted", 5)
    store.close()
    later = Store(url)
    statements: list[str] = []
    event.listen(later.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    try:
        (aborted,) = later.abort_unfinished_runs(tmp_path / "journal")  # run 1's v2 alone is left
        assert aborted.run_id == first and aborted.not_run == 1, aborted
        assert len(statements) < 20, len(statements)
    finally:
        later.close()
