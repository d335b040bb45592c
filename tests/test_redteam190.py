"""Red-team round 190: a dead run's journal, as the next start and `farm import` read it.

A journal is a file beside the database that anyone with the folder can edit, copy or concatenate,
and `farm import` reads journals an operator is handed. Found:
1. A result record holding a key the store fills itself (`run_id`, `id`, `snapshot_id`) was
   stored as it said: `run_id` put the verdict in another run (a finished run read a pass of a
   cell it never ran), `id` or `snapshot_id` failed the start on the database's constraint, the
   dead run left running and every later start failing the same, naming no journal.
2. A result line repeated (a journal concatenated with a copy of itself) was stored twice, and
   the start said "2 results taken".
3. `farm import` of a journal ending "finished" that lacks a planned cell's result, into a
   database without the run, stored it finished with the cell not-run: the JSON export said
   complete, exit 0 (the next start's completion of a running run already took it aborted: 185).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from farm_cli import farm
from sqlalchemy import select
from test_store_backends import result_record
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal, _encode
from orchestrator.store.tables import ResultRow, Run

RUN = {"trigger": "cron", "farm_version": "0", "selection": "--all", "host": "a", "config_file": "farm.yaml"}


def _dead_run(tmp_path: Path) -> tuple[str, Path]:
    """Run 1 finished (v1 passed); run 2, journaled (token tok), planned v1 and v2 and died."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = Store(url, create=True)
    done = store.begin_run(planned=[("k", "v1", "n", "")], **RUN)
    store.add_result(result_record(done, None, 1))
    store.finish_run(done, "finished", 0)
    store.journal = Journal(tmp_path / "journal", "tok")
    store.begin_run(planned=[("k", "v1", "n", ""), ("k", "v2", "n", "")], token="tok", **RUN)
    store.journal.close()
    store.close()
    return url, tmp_path / "journal" / "tok.jsonl"


def _result_line(owner: int, **extra: object) -> str:
    """v2's pass as the store journals it (no run_id, no snapshot_id), with `extra` keys."""
    fields = {k: v for k, v in result_record(owner, None, 2).columns().items() if k not in ("run_id", "snapshot_id")}
    return json.dumps({"kind": "result", "snapshot_ref": None, **fields, **extra}, default=_encode) + "\n"


def _rows(url: str) -> tuple[list[tuple[int, str, str]], list[tuple[int, str]]]:
    store = Store(url)
    try:
        with store.engine.connect() as db:
            results = db.execute(select(ResultRow.run_id, ResultRow.variant, ResultRow.outcome).order_by(ResultRow.id))
            runs = db.execute(select(Run.id, Run.status).order_by(Run.id))
            return [tuple(r) for r in results], [tuple(r) for r in runs]  # type: ignore[misc]
    finally:
        store.close()


@pytest.mark.parametrize("key,value", [("run_id", 1), ("id", 1), ("snapshot_id", 99)])
def test_a_journal_result_naming_another_row_is_refused_by_the_start(tmp_path: Path, key: str, value: int) -> None:
    """Before: run_id 1 put v2's pass in run 1 (finished; it never planned v2) and the start said
    "1 result taken"; id 1 and snapshot_id 99 failed the start ("failed writing: IntegrityError"),
    run 2 left running for every start after. Figure: the start names the journal, the record and
    the key; run 2 is aborted with both its cells not-run, run 1 holds v1 alone."""
    url, path = _dead_run(tmp_path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(_result_line(2, **{key: value}))
    later = Store(url)
    try:
        (aborted,) = later.abort_unfinished_runs(tmp_path / "journal")
    finally:
        later.close()
    assert aborted.added == 0 and aborted.not_run == 2, aborted
    assert str(path) in aborted.unread and f"record 3 (result): {key}" in aborted.unread, aborted.unread
    results, runs = _rows(url)
    assert results == [(1, "v1", "pass"), (2, "v1", "not-run"), (2, "v2", "not-run")], results
    assert runs == [(1, "finished"), (2, "aborted")], runs


def test_a_journal_metric_naming_another_run_is_refused(tmp_path: Path) -> None:
    """Before: a metric value's own `run_id` stood over its result's, in another run's trends.
    Figure: the record is refused, its key named."""
    url, path = _dead_run(tmp_path)
    metric = {"name": "t", "value": 1.0, "unit": "ms", "better": "lower", "tolerance": 0.1, "note": "", "run_id": 1}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(_result_line(2, metrics=[metric]))
    later = Store(url)
    try:
        (aborted,) = later.abort_unfinished_runs(tmp_path / "journal")
    finally:
        later.close()
    assert "record 3 (result): metrics" in aborted.unread and "run_id" in aborted.unread, aborted.unread
    assert aborted.added == 0


def test_a_repeated_result_line_is_not_stored_twice(tmp_path: Path) -> None:
    """Before: v2's line twice in the journal (a copy appended to itself): two pass rows of v2 in
    run 2 and "2 results taken". Figure: the journal is refused, naming both records; v2 not-run
    once, to import once the journal is mended."""
    url, path = _dead_run(tmp_path)
    line = _result_line(2)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + line)
    later = Store(url)
    try:
        (aborted,) = later.abort_unfinished_runs(tmp_path / "journal")
    finally:
        later.close()
    assert "record 4 (result) repeats record 3" in aborted.unread, aborted.unread
    results, _runs = _rows(url)
    assert [r for r in results if r[:2] == (2, "v2")] == [(2, "v2", "not-run")], results
    path.write_text(path.read_text().replace(line + line, line))  # mended: the import takes v2 once
    mended = Store(url)
    try:
        imported = mended.import_journal(path)
    finally:
        mended.close()
    assert imported.results == 1
    results, _runs = _rows(url)
    assert [r for r in results if r[:2] == (2, "v2")] == [(2, "v2", "pass")], results


def test_an_imported_finished_journal_lacking_a_cell_is_no_green_run(tmp_path: Path) -> None:
    """Before: `farm import` into a database without the run stored it finished, exit 0, its
    cell not-run; `farm report --format json` said complete and exited 0. Figure: the run is
    aborted (its exit kept), the export incomplete and exits non-zero."""
    config = toy_farm(tmp_path)
    folder = tmp_path / "elsewhere"
    other = Store(f"sqlite:///{tmp_path / 'other.db'}", create=True)  # its farm's own database, lost since
    other.journal = Journal(folder, "feedbeef0003")
    other.begin_run([("toy", "plain", "here", "")], token="feedbeef0003", **RUN)
    other.journal.write("finish", {"status": "finished", "exit_code": 0, "ended_at": datetime.now(UTC)})
    other.journal.close()
    other.close()
    imported = farm("import", str(folder / "feedbeef0003.jsonl"), "--config", str(config), cwd=tmp_path)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert "(aborted, 0 results)" in imported.stdout, imported.stdout
    report = farm("report", "--format", "json", "--config", str(config), cwd=tmp_path)
    exported = json.loads(report.stdout)
    assert exported["complete"] is False and exported["run"]["status"] == "aborted", exported["run"]
    assert report.returncode != 0
    _results, runs = _rows(load_farm(config).database_url)
    assert runs == [(1, "aborted")]


def test_verify_after_a_dead_run_on_a_read_only_mount_says_read_only(tmp_path: Path) -> None:
    """Before: `farm verify` with results.db's folder remounted read-only (a disk error under
    ext4's errors=remount-ro) said the folder "cannot be read and written by this process, root:
    it belongs to root (uid 0), mode 0755" and to `chown -R root` and `chmod`, which cannot help
    there. Figure: exit 5, it names results.db as on a read-only file system; the dead run is left
    as it was (running: no start could close it), nothing green."""
    import subprocess

    config = toy_farm(tmp_path)
    (tmp_path / "db").mkdir()
    config.write_text(config.read_text().replace("sqlite:///results.db", "sqlite:///db/results.db"))
    dead = Store(f"sqlite:///{tmp_path / 'db' / 'results.db'}", create=True)
    dead.journal = Journal(tmp_path / "db" / "results.db.journal", "feedbeef0004")
    dead.begin_run([("toy", "plain", "here", "")], token="feedbeef0004", **RUN)
    dead.journal.close()
    dead.close()
    folder = str(tmp_path / "db")
    assert subprocess.run(["mount", "--bind", folder, folder], check=False).returncode == 0
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", folder], check=True)
        done = farm("verify", "--all", "--no-report", "--config", str(config), cwd=tmp_path)
    finally:
        subprocess.run(["umount", folder], check=False)
    assert done.returncode == 5, done.stdout + done.stderr
    assert f"{folder}/results.db is on a read-only file system" in done.stderr, done.stderr
    assert "chown" not in done.stderr, done.stderr
    _results, runs = _rows(f"sqlite:///{tmp_path / 'db' / 'results.db'}")
    assert runs == [(1, "running")], runs


def test_another_runs_journal_under_this_runs_name_is_not_taken(tmp_path: Path) -> None:
    """Before: a journal copied over a dead run's (another run's, its token inside) was taken as
    the dead run's: its verdicts stored in the dead run. Figure: the start names the file and both
    tokens, takes nothing; both cells not-run."""
    url, path = _dead_run(tmp_path)
    text = path.read_text().replace('"token":"tok"', '"token":"other"')
    path.write_text(text + _result_line(2))
    later = Store(url)
    try:
        (aborted,) = later.abort_unfinished_runs(tmp_path / "journal")
    finally:
        later.close()
    assert aborted.added == 0 and aborted.not_run == 2, aborted
    assert f"{path}: its run record's token is 'other', not 'tok'" in aborted.unread, aborted.unread
