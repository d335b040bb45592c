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
    assert revision == "0005"
    with sqlite3.connect(path) as db:
        cards = db.execute("select distinct device, cc, real_gpu, identity from results").fetchall()
    # filled from each result's node snapshot; no identity: the dependencies' bytes were never recorded
    assert cards == [("NVIDIA H200", "9.0", 1, None)]
    # the upgraded database still renders: its cells stand in the matrix, but a result whose
    # inputs were not all identified certifies nothing (issue 9, case 4)
    index = render(store, tmp_path / "reports").read_text()
    assert index.count('data-node="h200"') >= 4
    assert "CC 9.0: VERIFIED" not in index and "CC 9.0: unverified" in index


def test_fresh_database_is_created_at_head(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/new.db")
    assert store.latest_run() is None
    with sqlite3.connect(tmp_path / "new.db") as db:
        tables = {t for (t,) in db.execute("select name from sqlite_master where type='table'")}
    assert {"runs", "results", "node_snapshots", "source_files", "alembic_version"} <= tables
