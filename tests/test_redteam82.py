"""Red-team round 82: leftovers of round 79's red team, around the reviewers' site.

1. `farm report --out results.db.journal` wrote the whole site into the journal's folder:
   an html `--out` was checked against jobs/ and kernels/ only (the exports were refused there).
2. `farm report --run 77 --out DIR` of a run that is not there exited 5 and left an empty DIR.
3. Stale pages after results.db was replaced: the old database's runs/N.html and cells/N.html
   stayed in reports/ beside the new database's, and a cell page of the old database whose
   stamp matched (the same result and run ids, a run started at the same moment) was kept
   and linked from the new index: the old green page over the new red verdict.
4. `farm show` and the cell page said nothing of a stored verdict whose job or inputs changed
   since (the matrix greys it, "job changed since" / "inputs changed since", and the JSON and
   JUnit exports flag it).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from click.testing import CliRunner, Result
from toyfarm import TOY_SOURCE, toy_farm

from orchestrator.cli import main
from orchestrator.store.database import Store

BROKEN_SOURCE = "int main( {\n"  # a build-fail: red where TOY_SOURCE is compile-only (no GPU here)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def verify(config: Path, code: int = 0) -> None:
    done = invoke("verify", "--all", "--config", str(config))
    assert done.exit_code == code, done.output


# ------------------------------------------------------------ 1. an html --out in the journal


def test_an_html_out_in_the_journal_is_refused(tmp_path: Path) -> None:
    config = toy_farm(tmp_path)
    verify(config)
    journal = tmp_path / "results.db.journal"
    assert journal.is_dir()
    for out in (journal, journal / "site"):
        done = invoke("report", "--out", str(out), "--config", str(config))
        assert done.exit_code == 3, done.output
        assert "--out" in done.output and "journal" in done.output, done.output
        assert not (out / "index.html").exists() and not (journal / "cells").exists()
    assert not (journal / "site").exists()


# ------------------------------------------------------------ 2. nothing made for a run not there


def test_a_report_of_a_run_not_there_makes_no_folder(tmp_path: Path) -> None:
    config = toy_farm(tmp_path)
    verify(config)
    out = tmp_path / "new" / "site"
    done = invoke("report", "--run", "77", "--out", str(out), "--config", str(config))
    assert done.exit_code == 5, done.output
    assert "no run 77" in done.output, done.output
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------ 3. a replaced database's site


def _replace_database(root: Path) -> None:
    """results.db lost: a fresh one in its place (its run ids start again at 1)."""
    for name in ("results.db", "results.db-wal", "results.db-shm"):
        (root / name).unlink(missing_ok=True)


def test_a_replaced_database_keeps_no_page_of_the_old_one(tmp_path: Path) -> None:
    config = toy_farm(tmp_path, broken="known-failure")
    for _ in range(3):
        verify(config)
    reports = tmp_path / "reports"
    old_cells = {p.name for p in (reports / "cells").iterdir()}
    assert {"2.html", "3.html"} <= {p.name for p in (reports / "runs").iterdir()}
    (reports / "notes.txt").write_text("the reviewer's own")
    _replace_database(tmp_path)
    verify(config)  # run 1 of the new database, 2 results
    assert (reports / "notes.txt").read_text() == "the reviewer's own"  # only the site's own pages go
    assert sorted(p.name for p in (reports / "runs").iterdir()) == ["1.html"]
    cells = {p.name for p in (reports / "cells").iterdir()}
    assert cells == {"1.html", "2.html"}, cells
    assert len(old_cells) == 6
    assert not list(reports.glob(".farm-old-*"))  # nothing of the old site left behind
    verify(config)  # the same database again: its pages are kept
    assert sorted(p.name for p in (reports / "runs").iterdir()) == ["1.html", "2.html"]


def test_a_database_rebuilt_from_its_journals_is_another_database(tmp_path: Path) -> None:
    """`farm import` into a fresh results.db: its result ids need not be the old ones' (a cell
    whose commit failed is in the journal), so its site starts afresh too."""
    config = toy_farm(tmp_path)
    verify(config)
    before = Store(f"sqlite:///{tmp_path}/results.db").database_identity()
    journals = sorted((tmp_path / "results.db.journal").glob("*.jsonl"))
    _replace_database(tmp_path)
    done = invoke("import", *map(str, journals), "--config", str(config))
    assert done.exit_code == 0, done.output
    after = Store(f"sqlite:///{tmp_path}/results.db").database_identity()
    assert before and after and before != after


def test_an_old_databases_cell_page_with_the_same_stamp_is_not_kept(tmp_path: Path) -> None:
    """The new database's run 1 started at the old run 1's moment (a clock set back, a copy): its
    result 1's page had the old page's stamp, and the old compile-only page stood, linked from
    the new index, over the new build-fail."""
    config = toy_farm(tmp_path)
    verify(config)
    with sqlite3.connect(tmp_path / "results.db") as db:
        (started,) = db.execute("SELECT started_at FROM runs WHERE id = 1").fetchone()
    _replace_database(tmp_path)
    toy_farm(tmp_path, source=BROKEN_SOURCE)
    done = invoke("verify", "--all", "--no-report", "--config", str(config))
    assert done.exit_code == 1, done.output
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute("UPDATE runs SET started_at = ? WHERE id = 1", (started,))
    toy_farm(tmp_path)  # the sources as the old database's run had them: no "inputs changed since"
    done = invoke("report", "--config", str(config))
    assert done.exit_code == 0, done.output
    page = (tmp_path / "reports" / "cells" / "1.html").read_text()
    assert '<span class="outcome">build-fail' in page, page


# ------------------------------------------------------------ 4. job or inputs changed since


def test_show_and_the_cell_page_say_the_job_changed_since(tmp_path: Path) -> None:
    config = toy_farm(tmp_path)
    verify(config)
    job = tmp_path / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("-O1", "-O2"))
    shown = invoke("show", "1", "--config", str(config))
    assert shown.exit_code == 0, shown.output
    assert "job changed since" in shown.output and "-O2" in shown.output, shown.output
    assert invoke("report", "--config", str(config)).exit_code == 0
    page = (tmp_path / "reports" / "cells" / "1.html").read_text()
    assert "job changed since" in page and "-O2" in page


def test_show_and_the_cell_page_say_the_inputs_changed_since(tmp_path: Path) -> None:
    config = toy_farm(tmp_path)
    verify(config)
    page = (tmp_path / "reports" / "cells" / "1.html").read_text()
    assert "changed since" not in page
    assert "changed since" not in invoke("show", "1", "--config", str(config)).output
    toy_farm(tmp_path, source=TOY_SOURCE + "// edited\n")
    shown = invoke("show", "1", "--config", str(config))
    assert shown.exit_code == 0, shown.output
    assert "inputs changed since" in shown.output, shown.output
    assert invoke("report", "--config", str(config)).exit_code == 0
    assert "inputs changed since" in (tmp_path / "reports" / "cells" / "1.html").read_text()
