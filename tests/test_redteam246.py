"""Red-team round 246: clocks. The farm host's wall clock stepping (NTP, a VM resumed from a
snapshot) between nights, against a real SQLite file, real journals and `farm import`.

Broke (before -> after):

1. A standing verdict's age was its own run's start, taken at its word unless it lay more than a
   day after the rendered run's (round 131). A run under a clock months ahead, followed by runs
   on a corrected clock, stamped its pass later than the runs that came after it: a later report
   read it days old, not stale, though every run since had started months after it. Its age is
   now counted from the earliest start of any run from its own up to the rendered one (a run
   cannot start before the runs before it): months old, stale.
2. `farm import` took a journal for the newest run where its start was not before the database's
   newest run's. A night's run under a clock stepped back (a VM resumed from a snapshot) stored a
   start days before the run before it; the journal of the night between (its database writes
   lost) read later, was imported as the newest run, and its older verdicts stood over the later
   night's. A newest run whose start is before an earlier run's (one this host's clock has
   passed) was read by a clock that was behind: the starts cannot order the journal against it,
   and the import is refused, naming --in-given-order.
"""

from __future__ import annotations

import dataclasses
import secrets
from datetime import UTC, timedelta
from pathlib import Path

import pytest
from farm_cli import farm
from test_journal_prune import attempt, journaled_run, result_record, snapshot_of
from test_redteam131 import backup, clock, restore
from toyfarm import toy_farm

from orchestrator.report.model import collect
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal

DAY = timedelta(days=1)


def _run(store: Store, folder: Path, outcome: str | None) -> int:
    """A run (started by the store's clock) with one result of cell k:a on n stamped as that clock reads
    now, or none (`outcome` None)."""
    from orchestrator.store import recording

    token = secrets.token_hex(6)
    store.journal = Journal(folder, token)
    run_id = store.begin_run(token=token, trigger="t", farm_version="t", host="h", config_file="f", selection="a")
    snapshot = store.add_snapshot(snapshot_of(run_id))
    if outcome is not None:
        at = recording.datetime.now(UTC)
        record = dataclasses.replace(result_record(run_id, snapshot, "a"), outcome=outcome, started_at=at, ended_at=at)
        store.add_result(record, [attempt(run_id, "a")])
    store.finish_run(run_id, "finished", 0)
    store.journal.close()
    store.journal = None
    return run_id


def test_a_verdict_stamped_after_the_runs_that_followed_it_ages_from_theirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: run 1's pass, under a clock 100 days ahead, was stamped a day before the rendered
    run 3; run 2 (corrected) started 100 days before that. The pass read 1 day old, not stale, on
    a report whose fleet had run for 100 days since. Figure: its age is from run 2's start, about
    100 days, stale."""
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    folder = tmp_path / "j"
    for offset, outcome in ((-DAY, "pass"), (-100 * DAY, None), (timedelta(0), None)):
        with monkeypatch.context() as shifted:
            clock(shifted, offset)
            _run(store, folder, outcome)
    with store.reading():
        model = collect(store)
    assert model.run.id == 3
    (cell,) = model.standing.values()
    assert cell.result.run_id == 1, cell
    assert 99 < cell.age_days < 101 and cell.stale, cell
    store.close()


def test_guard_a_verdict_of_a_run_behind_keeps_its_own_age(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before and after: a later run stamped after the verdict's own start never makes it younger:
    run 1's pass 40 days before run 3, run 2 between them, is 40 days old and stale."""
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    folder = tmp_path / "j"
    for offset, outcome in ((-40 * DAY, "pass"), (-DAY, None), (timedelta(0), None)):
        with monkeypatch.context() as shifted:
            clock(shifted, offset)
            _run(store, folder, outcome)
    with store.reading():
        model = collect(store)
    (cell,) = model.standing.values()
    assert 39 < cell.age_days < 41 and cell.stale, cell
    store.close()


def _night_lost_then_clock_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path, list[Path]]:
    """Night 0's run stored; night 1's run journaled, its database writes lost (the database
    restored from the backup taken before it); night 2's run stored under a clock stepped three
    days back. (database URL, farm.yaml, the journals by night)."""
    db, folder = tmp_path / "results.db", tmp_path / "results.db.journal"
    store = Store(f"sqlite:///{db}")
    journals = []
    with monkeypatch.context() as shifted:
        clock(shifted, -2 * DAY)
        journals.append(journaled_run(store, folder)[1])
    backup(db, tmp_path / "backup.db")
    with monkeypatch.context() as shifted:
        clock(shifted, -DAY)
        journals.append(journaled_run(store, folder)[1])
    store.close()
    restore(db, tmp_path / "backup.db")
    store = Store(f"sqlite:///{db}")
    with monkeypatch.context() as shifted:
        clock(shifted, -3 * DAY)
        journals.append(journaled_run(store, folder)[1])
    store.close()
    return f"sqlite:///{db}", toy_farm(tmp_path / "farm"), journals


def test_an_import_over_a_newest_run_stamped_before_the_run_before_it_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: night 1's journal (its start a day ago) read later than night 2's run (stamped three
    days ago by a clock stepped back) and was imported as run 3, the newest: its verdicts stood over
    night 2's. Figure: refused, saying the newest run's start is before run 1's and naming
    --in-given-order; the database keeps its two runs."""
    url, config, journals = _night_lost_then_clock_behind(tmp_path, monkeypatch)
    refused = farm("import", str(journals[1]), "--config", str(config), "--database", url)
    said = " ".join(refused.stderr.split())
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "run 2" in said and "before run 1" in said and "--in-given-order" in said, said
    store = Store(url, create=False)
    assert [run.token for run in store.runs()] == [journals[2].stem, journals[0].stem]
    store.close()


def test_guard_the_operator_may_still_import_it_in_given_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before and after: where the journal's run did come after the newest one, --in-given-order
    imports it as run 3."""
    url, config, journals = _night_lost_then_clock_behind(tmp_path, monkeypatch)
    done = farm("import", "--in-given-order", str(journals[1]), "--config", str(config), "--database", url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"imported {journals[1]} as run 3 (finished, 2 results)"]


def test_guard_a_run_ahead_before_the_newest_still_blocks_no_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before and after (round 131): an earlier run whose start is after this host's clock now was
    read by a clock ahead; it says nothing of the newest run's clock, and a later journal imports."""
    db, folder = tmp_path / "results.db", tmp_path / "results.db.journal"
    store = Store(f"sqlite:///{db}")
    journaled_run(store, folder)
    with monkeypatch.context() as shifted:
        clock(shifted, 3650 * DAY)
        journaled_run(store, folder)
    journaled_run(store, folder)
    backup(db, tmp_path / "backup.db")
    later = journaled_run(store, folder)[1]
    store.close()
    restore(db, tmp_path / "backup.db")
    url, config = f"sqlite:///{db}", toy_farm(tmp_path / "farm")
    done = farm("import", str(later), "--config", str(config), "--database", url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"imported {later} as run 4 (finished, 2 results)"]
