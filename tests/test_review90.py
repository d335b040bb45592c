"""Review round 90 of rounds 87-89, failing first.

1. `farm import` completing a run the database holds (completing.py) inserted the journal's verdict
   as a new row, its id above every later run's: the fleet's standing (the latest result per cell,
   by id) then took the aborted run's old verdict over the next run's re-run of the cell: a pass the
   next run no longer backed stood as the cell's latest.
2. A re-taken PostgreSQL run lock (its session ended by idle_session_timeout or a restart) stopped
   the process whenever the run its Store last wrote was no longer "running": `farm bisect` writes
   its walk's runs one after another on one Store, and its next run's start, the lock's session
   ended while the previous run's build went on, stopped the walk ("it marked this run N finished"),
   the process's own finish read as another farm's write.
3. The run lock's holder record (`<lock>.holder`, beside results.db or in a shared `lock_dir`) was
   opened following links and truncated: a link a group member planted there in place of it
   (the folder the farm's group writes) made the farm's cron user overwrite whatever file it
   points at, one the planter may not write (results.db itself, farm.yaml, a report).
4. Invisible characters escaped (round 89) took the joiners and variation selectors that legitimate
   text is made of: a kernel's "⚠️" or "✔️" (a sign and U+FE0F), an emoji sequence (joined by
   U+200D), Devanagari or Persian words (U+200D, U+200C) and a Japanese name's ideographic variant
   (U+E0100) showed as escapes on its page and in `farm show`.
5. `farm import` completing a run also took the verdicts its journal holds from after another
   farm's start had closed the run (its PostgreSQL lock session ended, round 87): that start marks
   it aborted and kills its processes on the nodes (reap_dead_runs, round 88), and the cell so
   killed, journaled as the kernel's crash before the run saw its lock gone, became the cell's
   verdict in the database: a node's trouble as a kernel's verdict.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlalchemy import Engine, delete, select
from test_redteam87 import _end_lock_session
from test_store_backends import postgres_admin, postgres_url, result_record  # noqa: F401 (fixtures)

from orchestrator.errors import StoreError
from orchestrator.store import lock
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.lock import RunLock, run_lock
from orchestrator.store.tables import MetricValue, ResultRow, Run, SassCount
from orchestrator.terminal import printable, printable_on_page

RUN = {"trigger": "cron", "farm_version": "0", "selection": "--all", "host": "a", "config_file": "farm.yaml"}


def _journaled_run(tmp_path: Path) -> tuple[str, Store, int]:
    """A SQLite run of two cells, journaled, its first result stored."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = Store(url, create=True)
    store.journal = Journal(tmp_path / "journal", "aa")
    first = store.begin_run(planned=[("k", "v1", "n", ""), ("k", "v2", "n", "")], token="aa", **RUN)
    store.add_result(result_record(first, None, 1))
    return url, store, first


def test_an_imported_verdict_never_stands_over_a_later_runs_rerun_of_its_cell(tmp_path: Path) -> None:
    url, store, first = _journaled_run(tmp_path)
    lost = store.add_result(result_record(first, None, 2))  # journaled; its commit refused (as round 87's)
    with store.engine.begin() as db:
        for table in (MetricValue, SassCount):
            db.execute(delete(table).where(table.result_id == lost))
        db.execute(delete(ResultRow).where(ResultRow.id == lost))
    store.journal.close()
    store.close()
    after = Store(url)  # the next start: the cell not-run in the first run, then failing in its own
    try:
        assert [a[:2] for a in after.abort_unfinished_runs()] == [(first, 1)]
        second = after.begin_run(planned=[("k", "v2", "n", "")], token="bb", **RUN)
        after.add_result(dataclasses.replace(result_record(second, None, 2), outcome="fail"))
        after.finish_run(second, "finished", 1)
        assert after.import_journal(tmp_path / "journal" / "aa.jsonl")[:3] == (first, "aborted", 1)
        verdicts, latest = after.standing(second)
        cell = next(key for key in verdicts if key[1] == "v2")
        assert (verdicts[cell].run_id, verdicts[cell].outcome) == (second, "fail")
        assert (latest[cell].run_id, latest[cell].outcome) == (second, "fail")
        assert after.standing(first)[0][cell].outcome == "pass"  # the first run's own page has its verdict
    finally:
        after.close()


def test_a_processs_next_run_after_its_own_finished_one_survives_a_retaken_lock(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    postgres_admin: Engine,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lock, "CHECK_EVERY", 0.0)  # every write checks its lock
    with run_lock(postgres_url, tmp_path, 0):
        store = Store(postgres_url)  # a bisection's: one Store, its walk's runs one after another
        try:
            first = store.begin_run(planned=[("k", "v1", "n", "")], token="b1", **RUN)
            store.finish_run(first, "finished", 0)
            _end_lock_session(postgres_admin)  # idle_session_timeout ends the lock's session
            second = store.begin_run(planned=[("k", "v1", "n", "")], token="b2", **RUN)
            store.finish_run(second, "finished", 0)
            with store.engine.connect() as db:
                assert db.scalar(select(Run.status).where(Run.id == second)) == "finished"
        finally:
            store.close()


def test_the_run_locks_holder_record_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "elsewhere" / "farm.yaml"
    victim.parent.mkdir()
    victim.write_text("nodes: {}\n")
    shared = tmp_path / "locks"
    shared.mkdir()
    (shared / "results.db.lock.holder").symlink_to(victim)  # planted by another user of the group
    with RunLock(shared / "results.db.lock"):
        pass
    assert victim.read_text() == "nodes: {}\n"


def test_joiners_and_variation_selectors_of_legitimate_text_stay_as_they_are() -> None:
    for said in (
        "\u26a0\ufe0f slow path taken; \u2714\ufe0f 3 of 3",
        "family: \U0001f468\u200d\U0001f469\u200d\U0001f467, \u2764\ufe0f\u200d\U0001f525",
        "\u0915\u094d\u200d\u0937 \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
        "\u845b\U000e0100\u57ce\u5e02",
    ):
        assert printable(said) == said
        assert printable_on_page(said) == said
    # drawn as nothing beside ASCII (a GPU name's, round 89's finding): still shown
    for forged, shown in (
        ("NVIDIA H100\u200b", "NVIDIA H100\\u200b"),
        ("NVIDIA H\u200d100", "NVIDIA H\\u200d100"),
        ("NVIDIA H100\u200d", "NVIDIA H100\\u200d"),
        ("NVIDIA H100\ufe0f", "NVIDIA H100\\ufe0f"),
        ("\u200dNVIDIA", "\\u200dNVIDIA"),
        ("\u4e2d\u200d ", "\u4e2d\\u200d "),
    ):
        assert printable(forged) == shown
        assert printable_on_page(forged) == shown


def test_an_import_never_takes_a_verdict_from_after_another_start_closed_its_run(tmp_path: Path) -> None:
    url, store, first = _journaled_run(tmp_path)
    other = Store(url)  # another farm host's start, the run's lock session ended: run 1 aborted, v2 not-run
    try:
        assert [a[:2] for a in other.abort_unfinished_runs()] == [(first, 1)]
    finally:
        other.close()
    # its kernel killed by that start's reap: the crash journaled, its commit refused (the lock lost)
    killed = dataclasses.replace(result_record(first, None, 2), outcome="fail", reason="killed by signal 9")
    with pytest.raises(StoreError, match="this run stops writing"):  # journaled, refused (review 188)
        store.add_result(killed)
    store.journal.close()
    store.close()
    after = Store(url)
    try:
        with pytest.raises(StoreError, match="after"):
            after.import_journal(tmp_path / "journal" / "aa.jsonl")
        with after.engine.connect() as db:
            rows = db.execute(select(ResultRow.variant, ResultRow.outcome).where(ResultRow.run_id == first)).all()
        assert sorted(rows) == [("v1", "pass"), ("v2", "not-run")], rows
    finally:
        after.close()
