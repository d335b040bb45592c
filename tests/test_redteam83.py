"""Red-team round 83: leftovers of round 82, around the reviewers' site and `farm import`.

1. results.db restored from an older backup of itself keeps its database_id: the site took it
   for the database it was rendered from, and the pages of the runs made after the backup
   (runs/N.html, their cells/ID.html) stayed, verdicts the database no longer holds.
2. `farm import J J` (one journal named twice, or by two spellings, or a copy of it) stored the
   first and refused the second: exit 5 with half the command done.
3. Two renders of one site at once (`farm report` beside `farm verify`'s): the one that read
   the database first could write its pages last, the index ending with a run as "running"
   that had finished.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from toyfarm import toy_farm

from orchestrator.cli import main
from orchestrator.report import site as site_mod
from orchestrator.store.database import Store

BROKEN_SOURCE = "int main( {\n"  # a build-fail: red where the toy source is compile-only (no GPU here)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def verify(config: Path, code: int = 0) -> None:
    done = invoke("verify", "--all", "--config", str(config))
    assert done.exit_code == code, done.output


def _runs(db: Path) -> list[tuple[int, str]]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT id, status FROM runs ORDER BY id").fetchall()


# ------------------------------------------------------------ 1. a database restored from a backup


def _remove_database(root: Path) -> None:
    for name in ("results.db", "results.db-wal", "results.db-shm"):
        (root / name).unlink(missing_ok=True)


def _backup(root: Path) -> Path:
    backup = root / "backup.db"
    src, dst = sqlite3.connect(root / "results.db"), sqlite3.connect(backup)
    src.backup(dst)
    src.close()
    dst.close()
    return backup


def test_a_database_restored_from_an_older_backup_keeps_no_page_of_its_later_runs(tmp_path: Path) -> None:
    config = toy_farm(tmp_path)
    verify(config)  # run 1, compile-only
    backup = _backup(tmp_path)
    toy_farm(tmp_path, source=BROKEN_SOURCE)
    verify(config, 1)  # run 2, a build-fail: then results.db is restored from the backup
    reports = tmp_path / "reports"
    with sqlite3.connect(tmp_path / "results.db") as conn:
        later = [rid for (rid,) in conn.execute("SELECT id FROM results WHERE run_id = 2")]
    assert later and (reports / "runs" / "2.html").is_file()
    _remove_database(tmp_path)
    shutil.copy(backup, tmp_path / "results.db")
    toy_farm(tmp_path)
    done = invoke("report", "--config", str(config))
    assert done.exit_code == 0, done.output
    assert not (reports / "runs" / "2.html").exists()  # a run the database does not hold
    for rid in later:
        assert not (reports / "cells" / f"{rid}.html").exists(), rid
    assert (reports / "runs" / "1.html").is_file()
    verify(config)  # the restored database's own run 2 (another one): rendered, and kept from now on
    # its matrix is the restored database's run 2 (the legend beside it names every outcome: round 97)
    matrix = (reports / "runs" / "2.html").read_text().split('id="matrix"', 1)[1].split("</table>", 1)[0]
    assert "build-fail" not in matrix and "compile-only" in matrix, matrix
    kept = (reports / "runs" / "1.html").stat().st_mtime_ns
    assert invoke("report", "--config", str(config)).exit_code == 0
    assert (reports / "runs" / "1.html").stat().st_mtime_ns == kept  # the same history: nothing taken away


# ------------------------------------------------------------ 2. one journal named twice


@pytest.mark.parametrize("spelling", ["same", "dotted", "link", "copy"])
def test_one_journal_named_twice_is_refused_before_anything_is_stored(tmp_path: Path, spelling: str) -> None:
    config = toy_farm(tmp_path)
    verify(config)
    (journal,) = sorted((tmp_path / "results.db.journal").glob("*.jsonl"))
    _remove_database(tmp_path)
    other = {
        "same": journal,
        "dotted": journal.parent / "." / journal.name,
        "link": tmp_path / "again.jsonl",
        "copy": tmp_path / "copy.jsonl",
    }[spelling]
    if spelling == "link":
        other.symlink_to(journal)
    elif spelling == "copy":
        shutil.copy(journal, other)
    done = invoke("import", str(journal), str(other), "--config", str(config))
    assert done.exit_code == 2, done.output
    assert str(journal) in done.output and "twice" in done.output, done.output
    assert _runs(tmp_path / "results.db") == []  # nothing stored: the command is done whole or not at all


# ------------------------------------------------------------ 3. two renders of one site at once


def test_a_render_that_read_the_database_first_never_writes_its_index_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = toy_farm(tmp_path)
    verify(config)
    verify(config)
    db = tmp_path / "results.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET status = 'running' WHERE id = 2")  # as it was while it ran
    reports = tmp_path / "reports"
    read, go = threading.Event(), threading.Event()
    take = site_mod.take_site

    def slow_take(*args: object, **kwargs: object) -> None:
        if threading.current_thread().name == "first":  # it has read the database: it waits there
            read.set()
            go.wait(10)
        take(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(site_mod, "take_site", slow_take)
    url = f"sqlite:///{db}"
    first = threading.Thread(target=site_mod.render, args=(Store(url), reports, 2), name="first")
    first.start()
    assert read.wait(10)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET status = 'finished' WHERE id = 2")  # the run ends meanwhile
    second = threading.Thread(target=site_mod.render, args=(Store(url), reports, 2), name="second")
    second.start()
    second.join(1.5)  # the second render: done before the first, or waiting for it
    go.set()
    first.join(20)
    second.join(20)
    assert not first.is_alive() and not second.is_alive()
    index = (reports / "index.html").read_text()
    assert "Run 2 (finished)" in index, index[:600]
    assert not list(reports.rglob("*.tmp"))


def test_a_backup_taken_mid_run_keeps_no_page_of_a_result_stored_after_it(tmp_path: Path) -> None:
    """The backup holds the newest run the site was rendered with, but not all its results: the
    page of the last one (reached by a link in the night's mail, a bookmark) showed a verdict the
    database no longer holds."""
    config = toy_farm(tmp_path)
    verify(config)
    toy_farm(tmp_path, broken="fails")
    verify(config, 1)  # run 2: plain and broken
    reports = tmp_path / "reports"
    backup = _backup(tmp_path)
    conn = sqlite3.connect(backup)  # as it was while run 2 ran: its last result not stored yet
    with conn:
        (last,) = conn.execute("SELECT max(id) FROM results").fetchone()
        conn.execute("DELETE FROM results WHERE id = ?", (last,))
        conn.execute("UPDATE runs SET status = 'running', ended_at = NULL WHERE id = 2")
    conn.close()  # its WAL into the file, which is what is copied
    assert (reports / "cells" / f"{last}.html").is_file()
    _remove_database(tmp_path)
    shutil.copy(backup, tmp_path / "results.db")
    done = invoke("report", "--config", str(config))
    assert done.exit_code == 0, done.output
    assert not (reports / "cells" / f"{last}.html").exists()
