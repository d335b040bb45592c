"""Review 136: leftovers of red-team round 131 (the farm host's wall clock stepping), against a
real SQLite file, real journals and the store's own functions.

Before/after:
1. A run marked aborted at the next start under a clock behind stored an end before its start
   (the abort's "now"); its JUnit `time` went negative (a CI server may reject the file), and
   so did a cell's whose stamps straddle a step, in JUnit and on its grid cell. The stored stamps
   stay as the clocks read them (the only trace of the step); the exports and pages clamp to 0
   and say so: JUnit property `clock_stepped`, JSON `"clock_stepped": true`, "? s (clock
   stepped)" on the page (report/durations.py).
2. `farm import` completing a run decided a journaled result came after another farm's start
   closed the run by comparing the result's end with the close's stamp: the run's clock ahead,
   a real verdict was turned away; behind, a result journaled after the close (a kernel that
   start's reap killed) got in. The closing start now appends a `closed` mark to the run's
   journal (store/closing.py) and the import goes by the records' order around it. Without a
   mark (a farm that could not reach the journal) it still goes by the clocks, and its refusal
   says so; where the close reads earlier than the run's own start, the clocks disagree and
   nothing is taken, said so.
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, select
from test_store_backends import result_record

from orchestrator.errors import StoreError
from orchestrator.report.export import as_json, junit
from orchestrator.report.model import collect
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal, read
from orchestrator.store.tables import MetricValue, ResultRow, Run, SassCount

HOURS = timedelta(hours=5)
RUN = {"trigger": "cron", "farm_version": "0", "selection": "--all", "host": "a", "config_file": "farm.yaml"}


def clock(monkeypatch: pytest.MonkeyPatch, offset: timedelta) -> None:
    """The farm host's wall clock `offset` off where the store reads it (run starts and ends,
    and the next start's abort)."""

    class Shifted(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return datetime.now(tz) + offset

    monkeypatch.setattr("orchestrator.store.recording.datetime", Shifted)
    monkeypatch.setattr("orchestrator.store.recovery.datetime", Shifted)


def _begun(tmp_path: Path, offset: timedelta = timedelta(0)) -> tuple[str, Store, int]:
    """A SQLite run of two cells, journaled (token aa), its first result stored; its stamps
    `offset` off."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = Store(url, create=True)
    store.journal = Journal(tmp_path / "journal", "aa")
    first = store.begin_run(planned=[("k", "v1", "n", ""), ("k", "v2", "n", "")], token="aa", **RUN)
    store.add_result(_shifted(result_record(first, None, 1), offset))
    return url, store, first


def _shifted(record, offset: timedelta):  # type: ignore[no-untyped-def]
    return dataclasses.replace(record, started_at=record.started_at + offset, ended_at=record.ended_at + offset)


def _lost(store: Store, run_id: int, offset: timedelta) -> None:
    """Cell v2's result journaled, its commit refused (its rows gone, as test_review90 does): by
    the store itself where another farm's start closed the run (review 188)."""
    try:
        lost = store.add_result(_shifted(result_record(run_id, None, 2), offset))
    except StoreError as err:
        assert "this run stops writing" in str(err)
        return
    with store.engine.begin() as db:
        for table in (MetricValue, SassCount):
            db.execute(delete(table).where(table.result_id == lost))
        db.execute(delete(ResultRow).where(ResultRow.id == lost))


def _closed(url: str, folder: Path | None) -> list[tuple[int, int]]:
    """Another farm's start: the run marked aborted (its closing mark in `folder`'s journal)."""
    other = Store(url)
    try:
        return [one[:2] for one in other.abort_unfinished_runs(folder)]  # (run id, not-run cells)
    finally:
        other.close()


def _v2(url: str, run_id: int) -> list[str]:
    store = Store(url, create=False)
    try:
        with store.engine.connect() as db:
            where = (ResultRow.run_id == run_id) & (ResultRow.variant == "v2")
            return list(db.scalars(select(ResultRow.outcome).where(where)))
    finally:
        store.close()


# 1 -------------------------------------------------------------------------------------------


def test_an_abort_under_a_clock_behind_exports_no_negative_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, store, first = _begun(tmp_path)
    store.journal.close()
    store.close()
    with monkeypatch.context() as behind:
        clock(behind, -HOURS)
        assert _closed(url, tmp_path / "journal") == [(first, 1)]
    store = Store(url, create=False)
    try:
        with store.engine.connect() as db:
            started, ended = db.execute(select(Run.started_at, Run.ended_at).where(Run.id == first)).one()
        assert ended < started  # kept as the clock read it: the trace of its step
        with store.reading():
            model = collect(store)
    finally:
        store.close()
    suites = ET.fromstring(junit(model))
    times = [float(e.get("time")) for e in suites.iter() if e.get("time") is not None]
    assert times and min(times) >= 0, times
    suite = suites.find("testsuite")
    said = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert "clock stepped back" in said.get("clock_stepped", ""), said
    document = json.loads(as_json(model))
    assert document["run"]["clock_stepped"] is True
    assert [r["clock_stepped"] for r in document["cells"] if r["variant"] == "v1"] == [False]


def test_a_cell_whose_stamps_straddle_a_step_back_has_no_negative_time(tmp_path: Path) -> None:
    """JUnit's testcase time, JSON's cell and the index's matrix cell ("-18000.0 s" before)."""
    from orchestrator.report.grids import standing_matrix
    from orchestrator.report.site import _env  # type: ignore[attr-defined]

    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = Store(url, create=True)
    try:
        run_id = store.begin_run(planned=[("k", "v1", "n", "")], token="cc", **RUN)
        record = result_record(run_id, None, 1)
        store.add_result(dataclasses.replace(record, ended_at=record.started_at - HOURS))
        store.finish_run(run_id, "finished", 0)
        with store.reading():
            model = collect(store)
    finally:
        store.close()
    case = ET.fromstring(junit(model)).find("testsuite").find("testcase")
    assert float(case.get("time")) == 0.0
    props = {p.get("name") for p in case.iter("property")}
    assert "clock_stepped" in props, props
    (cell,) = json.loads(as_json(model))["cells"]
    assert cell["clock_stepped"] is True
    page = str(standing_matrix(model, _env()))
    assert "? s (clock stepped)" in page and "-18000" not in page, page


# 2 -------------------------------------------------------------------------------------------


def test_a_real_verdict_under_a_clock_ahead_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's clock five hours ahead; its commit of v2 failed, then the farm died. The next
    start (clock corrected) closed it: v2's verdict was "after" the close by the clocks alone."""
    with monkeypatch.context() as ahead:
        clock(ahead, HOURS)
        url, store, first = _begun(tmp_path, HOURS)
        _lost(store, first, HOURS)
    store.journal.close()
    store.close()
    # the closing start takes v2 from the journal itself, before its mark (review 185): nothing is
    # left not-run, and the import finds nothing more to add
    assert _closed(url, tmp_path / "journal") == [(first, 0)]
    after = Store(url)
    try:
        with pytest.raises(StoreError, match="already in"):
            after.import_journal(tmp_path / "journal" / "aa.jsonl")
    finally:
        after.close()
    assert _v2(url, first) == ["pass"]


def test_a_result_journaled_after_the_close_stays_out_under_a_clock_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run went on after another farm's start closed it (its lock session ended); its
    clock five hours behind, the crash it journaled then (that start's reap killed the kernel)
    was "before" the close and became the cell's verdict."""
    url, store, first = _begun(tmp_path)
    assert _closed(url, tmp_path / "journal") == [(first, 1)]
    killed = dataclasses.replace(result_record(first, None, 2), outcome="fail", reason="killed by signal 9")
    with pytest.raises(StoreError, match="this run stops writing"):  # journaled, its commit refused
        store.add_result(_shifted(killed, -HOURS))
    store.journal.close()
    store.close()
    after = Store(url)
    try:
        with pytest.raises(StoreError, match="journaled after another farm's start closed the run"):
            after.import_journal(tmp_path / "journal" / "aa.jsonl")
    finally:
        after.close()
    assert _v2(url, first) == ["not-run"]
    kinds = [kind for kind, _ in read(tmp_path / "journal" / "aa.jsonl")]
    assert kinds.index("closed") < len(kinds) - 1 and kinds[-1] == "result", kinds


def test_without_a_closing_mark_the_refusal_says_the_clocks_disagree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start that could not reach the journal (another host's) leaves no mark: the import goes
    by the clocks. The run's clock five hours ahead, the close reads before its start: the clocks
    disagree, nothing is taken and the refusal says why (it said the result "ended after")."""
    with monkeypatch.context() as ahead:
        clock(ahead, HOURS)
        url, store, first = _begun(tmp_path, HOURS)
        _lost(store, first, HOURS)
    store.journal.close()
    store.close()
    assert _closed(url, None) == [(first, 1)]
    assert "closed" not in [kind for kind, _ in read(tmp_path / "journal" / "aa.jsonl")]
    after = Store(url)
    try:
        with pytest.raises(StoreError, match="the clocks disagree"):
            after.import_journal(tmp_path / "journal" / "aa.jsonl")
    finally:
        after.close()
    assert _v2(url, first) == ["not-run"]


def test_guard_without_a_mark_a_result_stamped_after_the_close_says_it_went_by_clocks(tmp_path: Path) -> None:
    url, store, first = _begun(tmp_path)
    assert _closed(url, None) == [(first, 1)]
    _lost(store, first, HOURS)  # stamped after the close
    store.journal.close()
    store.close()
    after = Store(url)
    try:
        with pytest.raises(StoreError, match="by the clocks of the run's host"):
            after.import_journal(tmp_path / "journal" / "aa.jsonl")
    finally:
        after.close()
