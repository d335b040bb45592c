"""Red-team round 131: the farm host's own clock stepping (hours or years ahead for one run, then
corrected by NTP; or behind), against a real SQLite file, real journals and `farm import`.

Broke (before/after):
- `farm import` compared a journal's start with the run of the LATEST start in the database, not
  the newest run (highest id): one run stored under a clock ten years ahead refused every later
  run's journal ("started before run 2") for ten years, though later runs sat above it. Now the
  newest run is the highest id, as every standing query takes it (store/run_order.py).
- Where that newest run itself started after this host's clock now (its clock was ahead), the
  refusal said only "import journals oldest first": no way to bring in the run that really came
  after it. It now says its start is in the future and names `farm import --in-given-order`,
  which takes the journals as newer than the database's newest run, in the order given.
- The ledger's "first on" (header-outdated) and the stale flag's certificate were picked by the
  result's start time: a pass from a run whose clock was ahead was "the latest certificate" over
  later ones. They are picked by result id now.
- A standing verdict from a run whose clock was years ahead was 0 days old (its age clamped) on
  every later report until that date came: a pass no later run backed never went stale. A
  verdict of an earlier run that started more than a day after the rendered run has no age the
  farm can tell: it is stale ("age unknown") now.

Held (kept as guards): the report's latest run and "what changed" follow run ids under a clock
behind; journal pruning keeps the newest journals by run id; `farm show` names the run by id.

Open: a journal records no run id, so journals imported together whose starts disagree with
their real order still go by start unless `--in-given-order` is passed; completing.py judges a
journaled result "late" by comparing its end with the closing start's wall clock.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from farm_cli import farm
from test_journal_prune import attempt, journaled_run, result_record, snapshot_of
from toyfarm import toy_farm

from orchestrator.report import ledger as ledger_mod
from orchestrator.report.ledger import Certificate
from orchestrator.report.model import collect
from orchestrator.store import journal
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal

YEARS = timedelta(days=3650)


def clock(monkeypatch: pytest.MonkeyPatch, offset: timedelta) -> None:
    """The farm host's wall clock `offset` off for the store (its run starts, ends, journals)."""

    class Shifted(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return datetime.now(tz) + offset

    monkeypatch.setattr("orchestrator.store.recording.datetime", Shifted)


def backup(db: Path, to: Path) -> None:
    source, target = sqlite3.connect(db), sqlite3.connect(to)
    try:
        source.backup(target)
    finally:  # a connection's context manager commits, and leaves it open
        source.close()
        target.close()


def restore(db: Path, saved: Path) -> None:
    for extra in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        extra.unlink(missing_ok=True)
    db.write_bytes(saved.read_bytes())


def _ahead_run_then(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, later: int, saved_after: int) -> list[Path]:
    """Run 1, run 2 under a clock ten years ahead, then `later` runs on a corrected clock; the
    database backed up after run `saved_after` and restored over results.db. Journals, by run."""
    db, folder = tmp_path / "results.db", tmp_path / "results.db.journal"
    store = Store(f"sqlite:///{db}")
    paths = [journaled_run(store, folder)[1]]
    with monkeypatch.context() as ahead:
        clock(ahead, YEARS)
        paths.append(journaled_run(store, folder)[1])
    if saved_after == 2:
        backup(db, tmp_path / "backup.db")
    for _ in range(later):
        paths.append(journaled_run(store, folder)[1])
        if len(paths) == saved_after:
            backup(db, tmp_path / "backup.db")
    store.close()
    restore(db, tmp_path / "backup.db")
    return paths


def test_a_run_under_a_clock_years_ahead_blocks_no_later_runs_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """results.db restored from a backup of runs 1-3 (run 2 ten years ahead): runs 4 and 5's
    journals were refused "started ... before run 2" (and would be for ten years)."""
    journals = _ahead_run_then(tmp_path, monkeypatch, later=3, saved_after=3)
    config = toy_farm(tmp_path / "farm")
    url = f"sqlite:///{tmp_path / 'results.db'}"
    done = farm("import", str(journals[4]), str(journals[3]), "--config", str(config), "--database", url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"imported {journals[3]} as run 4 (finished, 2 results)",
        f"imported {journals[4]} as run 5 (finished, 2 results)",
    ]


def test_an_import_below_a_newest_run_from_the_future_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backup's newest run is the one ten years ahead: run 3's journal cannot be told newer by
    its start. The refusal says that run's start is after this host's clock now and names
    --in-given-order, which imports it as run 3."""
    journals = _ahead_run_then(tmp_path, monkeypatch, later=1, saved_after=2)
    config = toy_farm(tmp_path / "farm")
    url = f"sqlite:///{tmp_path / 'results.db'}"
    refused = farm("import", str(journals[2]), "--config", str(config), "--database", url)
    assert refused.returncode != 0
    said = " ".join(refused.stderr.split())
    assert "before run 2" in said and "after this host's clock now" in said, said
    assert "farm import --in-given-order" in said, said
    done = farm("import", "--in-given-order", str(journals[2]), "--config", str(config), "--database", url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"imported {journals[2]} as run 3 (finished, 2 results)"]
    # the database's order is the runs' real one: the imported run above the one that ran ahead
    store = Store(url, create=False)
    assert [run.token for run in store.runs()] == [journals[2].stem, journals[1].stem, journals[0].stem]
    store.close()


def _cert(result_id: int, when: datetime, identity: str) -> Certificate:
    return Certificate(result_id, result_id, when, identity, "v", "n", "T4", "7.5", None, None, "nvcc", "sass", "PASS")


def test_the_ledgers_first_and_latest_certificates_go_by_result_id() -> None:
    """Result 1's run had a clock ten years ahead: "first on" named result 2, and the stale
    flag named result 1 as the latest certificate of the old identity, not result 3."""
    now = datetime(2026, 12, 6, tzinfo=UTC)
    current = [_cert(1, now + YEARS, "a" * 64), _cert(2, now, "a" * 64)]
    built = ledger_mod.build("k", "k.cu", "a" * 64, b"// UNVERIFIED: x\n", current, ["7.5"])
    first = [text for kind, text in built.flags if kind == "header-outdated"]
    assert first and "result 1)" in first[0], built.flags
    older = [_cert(1, now + YEARS, "b" * 64), _cert(3, now, "b" * 64)]
    stale = ledger_mod.build("k", "k.cu", "a" * 64, b"", older, ["7.5"])
    flags = [text for kind, text in stale.flags if kind == "stale"]
    assert flags and "(result 3)" in flags[0], stale.flags


def _stored_run(store: Store, folder: Path, at: datetime, outcome: str | None) -> int:
    """A run with one result of cell k:a on n (at `at`), or none (`outcome` None)."""
    import secrets

    token = secrets.token_hex(6)
    store.journal = Journal(folder, token)
    run_id = store.begin_run(token=token, trigger="t", farm_version="t", host="h", config_file="f", selection="a")
    snapshot = store.add_snapshot(snapshot_of(run_id))
    if outcome is not None:
        record = dataclasses.replace(result_record(run_id, snapshot, "a"), outcome=outcome, started_at=at, ended_at=at)
        store.add_result(record, [attempt(run_id, "a")])
    store.finish_run(run_id, "finished", 0)
    store.journal.close()
    store.journal = None
    return run_id


def test_a_verdict_from_a_clock_years_ahead_goes_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run 1's pass was stored under a clock ten years ahead; run 2 (corrected) ran the cell no
    more: it stood 0 days old, not stale, on every report for ten years."""
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    folder = tmp_path / "j"
    with monkeypatch.context() as ahead:
        clock(ahead, YEARS)
        _stored_run(store, folder, datetime.now(UTC) + YEARS, "pass")
    _stored_run(store, folder, datetime.now(UTC), None)
    with store.reading():
        model = collect(store)
    assert model.run.id == 2
    (cell,) = model.standing.values()
    assert cell.result.run_id == 1 and cell.stale, cell
    store.close()


def test_guard_latest_run_and_changes_follow_run_ids_under_a_clock_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 2's clock was ten years behind: it is still the latest run, its failure the cell's
    standing verdict and a regression from run 1's pass; its age is its own run's (none)."""
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    folder = tmp_path / "j"
    _stored_run(store, folder, datetime.now(UTC), "pass")
    with monkeypatch.context() as behind:
        clock(behind, -YEARS)
        _stored_run(store, folder, datetime.now(UTC) - YEARS, "fail")
    assert store.latest_run().id == 2
    with store.reading():
        model = collect(store)
    assert model.run.id == 2
    (cell,) = model.standing.values()
    assert (cell.result.run_id, cell.result.outcome, cell.stale) == (2, "fail", False)
    (change,) = model.changes.values()
    assert change.change == "regression", change
    store.close()


def test_guard_pruning_keeps_the_newest_journals_by_run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run 3's clock was ten years behind: with journal_keep 1 its journal stays, the others go."""
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    folder = tmp_path / "j"
    paths = [journaled_run(store, folder)[1], journaled_run(store, folder)[1]]
    with monkeypatch.context() as behind:
        clock(behind, -YEARS)
        paths.append(journaled_run(store, folder)[1])
    assert journal.started_at(paths[2]) < journal.started_at(paths[0])
    assert journal.prune(folder, store, 1) == paths[:2]
    assert set(folder.glob("*.jsonl")) == {paths[2]}
    store.close()
