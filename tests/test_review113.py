"""Review 113: results.cuda_waived (migration 0015), where it is read, upgraded and imported.

`was_waived` reads a pass's cuda_waived strictly (AttributeError where a query left it out). These
pin that every report path reads it from rows that hold it, on the committed results.db upgraded
from 0014 with its passes waived; that 0015 keeps that database whole; and that `farm import`
refuses a journal's cuda_waived that is no bool, naming the file, and never flags a result that
is no pass.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_records import OLD_JOURNAL

from orchestrator.cli import main
from orchestrator.cuda_waiver import FLAG, NOTE, PASSED
from orchestrator.errors import StoreError
from orchestrator.store.database import Store
from orchestrator.store.engine import _scripts

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "results.db"
CONFIG = ROOT / "farms" / "hopper-h100.yaml"


def _counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as c:
        tables = [t for (t,) in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: c.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def _upgraded(tmp_path: Path) -> Path:
    db = tmp_path / "results.db"
    shutil.copyfile(COMMITTED, db)
    Store(f"sqlite:///{db}").close()  # what `farm verify` does to it
    return db


def _revision(db: Path) -> str:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT version_num FROM alembic_version").fetchone()[0]


@pytest.mark.skipif(not COMMITTED.exists(), reason="no committed results.db")
def test_the_committed_database_upgrades_whole(tmp_path: Path) -> None:
    """0014 -> 0015 on the farm's own database: every row kept, foreign keys intact, and the flag
    set exactly where the old rule (the note in a pass's expected_reason) said waived. Once the
    committed database is at 0015 itself (upgraded by the runs that followed), the same holds of
    it as committed: the synthetic 0014 database of test_review111 keeps testing the upgrade."""
    assert int(_revision(COMMITTED)) >= 14, "the committed database is older than 0014"
    before = _counts(COMMITTED)
    with sqlite3.connect(COMMITTED) as c:
        legacy = {
            i
            for i, o, r in c.execute("SELECT id, outcome, expected_reason FROM results")
            if o in PASSED and NOTE in (r or "")
        }
    db = _upgraded(tmp_path)
    assert _revision(db) == _scripts().get_current_head()  # the newest this farm knows
    assert _counts(db) == before
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA foreign_key_check").fetchall() == []
        assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        flagged = {i for (i,) in c.execute("SELECT id FROM results WHERE cuda_waived")}
        nulls = c.execute("SELECT count(*) FROM results WHERE cuda_waived IS NULL").fetchone()[0]
    assert flagged == legacy and nulls == 0


def _report(db: Path, *args: str) -> str:
    done = CliRunner().invoke(main, [*args, "--config", str(CONFIG), "--database", f"sqlite:///{db}"])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    assert done.exit_code in (0, 1), done.output
    return done.output


@pytest.mark.skipif(not COMMITTED.exists(), reason="no committed results.db")
def test_every_report_path_reads_the_flag_on_the_committed_database(tmp_path: Path) -> None:
    """Every pass of the upgraded committed database made waived: the site (index, run, kernel,
    cell pages, ledger, history) for the latest run and the first, the JSON and JUnit exports and
    `farm show` read it without an AttributeError, and the exports flag each pass."""
    db = _upgraded(tmp_path)
    with sqlite3.connect(db) as c:
        c.execute(f"UPDATE results SET cuda_waived = 1 WHERE outcome IN {tuple(PASSED)}")
        runs = [r for (r,) in c.execute("SELECT id FROM runs WHERE trigger != 'bisect' ORDER BY id")]
        passes = [i for (i,) in c.execute("SELECT id FROM results WHERE cuda_waived ORDER BY id")]
    assert runs and passes
    for run_id in (runs[0], runs[-1]):
        site = tmp_path / f"site{run_id}"
        _report(db, "report", "--run", str(run_id), "--out", str(site))
        assert FLAG in (site / "index.html").read_text()
        assert FLAG in (site / "runs" / f"{run_id}.html").read_text()
        cells = json.loads(_report(db, "report", "--run", str(run_id), "--format", "json"))["cells"]
        assert all(c["cuda_error_waived"] is (c["outcome"] in PASSED) for c in cells)
        cases = ET.fromstring(_report(db, "report", "--run", str(run_id), "--format", "junit")).iter("testcase")
        said = [p.get("value") for case in cases for p in case.iter("property") if p.get("name") == "cuda_error_waived"]
        assert said == [FLAG] * sum(c["outcome"] in PASSED for c in cells)
    for result_id in (passes[0], passes[-1]):
        assert f"result {result_id} " in _report(db, "show", str(result_id))


def _journal(tmp_path: Path, waived: object, outcome: str = "pass") -> Path:
    text = OLD_JOURNAL.replace('"expected_reason":"r",', f'"expected_reason":"r","cuda_waived":{json.dumps(waived)},')
    text = text.replace('"outcome":"pass",', f'"outcome":"{outcome}",', 1)
    path = tmp_path / "0123456789ab.jsonl"
    path.write_text(text)
    return path


@pytest.mark.parametrize("waived", [1, 0, "true", None, [True]])
def test_a_journals_flag_that_is_no_bool_is_refused_naming_the_file(tmp_path: Path, waived: object) -> None:
    """An int (a bool is one to isinstance), a string, null: refused whole, the file named, nothing stored."""
    path = _journal(tmp_path, waived)
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        with pytest.raises(StoreError, match=rf"{path}: record \d+ \(result\): cuda_waived is"):
            store.import_journal(path)
        assert store.latest_run() is None
    finally:
        store.close()


@pytest.mark.parametrize("outcome", ["fail", "not-run", "known-failure", "expected-refusal", "timeout", "fixed"])
def test_a_journals_flag_on_a_result_that_is_no_pass_is_dropped(tmp_path: Path, outcome: str) -> None:
    """`cuda_waived: true` journaled on a result that is no pass (a hand-edited or damaged journal)
    is stored false; on a fixed (a pass of a known failure) it stands."""
    path = _journal(tmp_path, True, outcome)
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        store.import_journal(path)
        (row,) = [r for r in store.results(store.latest_run().id) if r.variant == "a"]
    finally:
        store.close()
    assert row.outcome == outcome and row.cuda_waived is (outcome in PASSED)


def test_farm_import_says_which_journal_it_refused(tmp_path: Path) -> None:
    """The CLI's word for a journal whose flag is a string: the file, the field, nothing imported."""
    path = _journal(tmp_path, "yes")
    db = tmp_path / "results.db"
    done = CliRunner().invoke(main, ["import", str(path), "--config", str(CONFIG), "--database", f"sqlite:///{db}"])
    assert done.exit_code != 0
    assert str(path) in done.output and "cuda_waived is 'yes'" in done.output, done.output


@pytest.mark.parametrize(("said", "waived"), [({}, True), ({"cuda_waived": False}, False)])
def test_a_run_completed_from_its_journal_gets_the_flag(tmp_path: Path, said: dict[str, bool], waived: bool) -> None:
    """completing.py: the run is in the database without its cell `a` (a commit that failed, the cell
    not-run); its journal's verdict, added over the not-run row, carries the flag: by the old rule
    for a journal of a farm before 0015 (the note, no field), by its own field after."""
    text = OLD_JOURNAL.replace('"expected_reason":"r",', f'"expected_reason":"r; {NOTE}",')
    text = text.replace(
        '"expected_reason":', "".join(f'"{k}":{json.dumps(v)},' for k, v in said.items()) + '"expected_reason":', 1
    )
    lines = text.splitlines(keepends=True)
    (lost,) = [i for i, line in enumerate(lines) if '"kind":"result"' in line and '"variant":"a"' in line]
    path = tmp_path / "0123456789ab.jsonl"
    path.write_text("".join(lines[:lost] + lines[lost + 1 :]))
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        run_id, _status, _n = store.import_journal(path)[:3]
        assert [r.outcome for r in store.results(run_id) if r.variant == "a"] == ["not-run"]
        path.write_text(text)
        assert store.import_journal(path)[0] == run_id
        (row,) = [r for r in store.results(run_id) if r.variant == "a"]
    finally:
        store.close()
    assert (row.outcome, row.cuda_waived) == ("pass", waived)
