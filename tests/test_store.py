"""The results store: migrations, and what a database of the first schema keeps."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from orchestrator.report import render
from orchestrator.store import Store

FIRST_SCHEMA_DB = Path(__file__).parent / "data" / "first-schema.db"  # written by farm 0.1.0 on the H200


def test_first_schema_database_upgrades_in_place(tmp_path):
    path = tmp_path / "results.db"
    shutil.copyfile(FIRST_SCHEMA_DB, path)
    with sqlite3.connect(path) as db:
        before = db.execute("select id, kernel, variant, outcome from results order by id").fetchall()
        assert "alembic_version" not in {t for (t,) in db.execute("select name from sqlite_master")}
    store = Store(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:
        after = db.execute("select id, kernel, variant, outcome from results order by id").fetchall()
        (revision,) = db.execute("select version_num from alembic_version").fetchone()
    assert after == before and len(before) == 8
    assert revision != ""
    # and the upgraded database still renders, with its certificate
    index = render(store, tmp_path / "reports")
    assert "CC 9.0: VERIFIED" in index.read_text()


def test_fresh_database_is_created_at_head(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/new.db")
    assert store.latest_run() is None
    with sqlite3.connect(tmp_path / "new.db") as db:
        tables = {t for (t,) in db.execute("select name from sqlite_master where type='table'")}
    assert {"runs", "results", "node_snapshots", "source_files", "alembic_version"} <= tables
