"""Red-team round 215: the results database across farm versions, failing first.

1. A database whose alembic_version row was removed (or the table dropped: an edit, a partial
   restore) was taken for a farm 0.1.0 database: `farm show` said "a farm from before schema
   revisions wrote it ... `farm verify` upgrades it", and `farm verify` stamped it 0001, re-ran
   every migration and failed on each start ("table attempts already exists ... it is left at 0001",
   which it was not). A revision no farm writes (another program's Alembic table in a shared
   PostgreSQL database) was called "written by a newer farm. Upgrade the farm."
2. An alembic_version table holding two rows made every command, `farm show` too, exit 70 "internal
   error (CommandError: ...); this is a bug in farm".
3. A journal written by a farm before migration 0016 (no `farm_writable`) imported with its pass
   that ran unconfined on the farm's own machine stored farm_writable false: it certified, where the
   same run in its upgraded database (0016 fills the flag by the stage detail) certifies nothing.
4. A journal written by a newer farm, with a field this farm does not know, was imported with that
   field dropped without a word: whatever it said of the verdict was lost.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from farm_cli import farm
from sqlalchemy import create_engine, text
from test_records import OLD_JOURNAL
from test_store_backends import HEAD, postgres_admin, postgres_url  # noqa: F401 (fixtures)
from toyfarm import toy_farm

from orchestrator.errors import StoreError
from orchestrator.store.database import Store

UNCONFINED = {"run": {"status": "ok", "detail": "the kernel ran unconfined (no Landlock): it could have written"}}


def _head_database(url: str) -> None:
    Store(url).close()


def _edit(url: str, sql: str) -> None:
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text(sql))
    engine.dispose()


def _revisions(url: str) -> list[str]:
    engine = create_engine(url)
    with engine.connect() as connection:
        found = [r for (r,) in connection.execute(text("SELECT version_num FROM alembic_version"))]
    engine.dispose()
    return found


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.mark.parametrize("create", [True, False])
def test_a_database_that_lost_its_revision_row_is_refused_as_such(url: str, create: bool) -> None:
    """Before: taken for a 0.1.0 database; `farm verify` failed on every start ("table attempts already
    exists", "left at 0001"); `farm show` said `farm verify` upgrades it. Figure: the error says the
    revision record is lost, names the later tables, and nothing is stamped."""
    _head_database(url)
    _edit(url, "DELETE FROM alembic_version")
    with pytest.raises(StoreError) as refused:
        Store(url, create=create)
    said = str(refused.value)
    assert "no schema revision" in said and "attempts" in said and "backup" in said, said
    assert "already exists" not in said and "from before schema revisions" not in said
    assert _revisions(url) == []  # nothing stamped


def test_a_revision_no_farm_wrote_is_not_called_a_newer_farms(url: str) -> None:
    """Before: "written by a newer farm ... Upgrade the farm." for another program's Alembic revision.
    Figure: it says no farm wrote it and to give the farm a database of its own."""
    _head_database(url)
    _edit(url, "UPDATE alembic_version SET version_num = 'ae1027a6acf'")
    with pytest.raises(StoreError) as refused:
        Store(url)
    said = str(refused.value)
    assert "no farm wrote" in said and "newer farm" not in said, said
    assert _revisions(url) == ["ae1027a6acf"]


def test_a_newer_farms_revision_is_still_refused_as_newer(url: str) -> None:
    _head_database(url)
    _edit(url, "UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(StoreError, match=f"9999, written by a newer farm; this farm knows revisions up to {HEAD}"):
        Store(url)


def test_two_revision_rows_are_a_store_error_not_a_bug(tmp_path: Path) -> None:
    """Before: `farm show` exited 70, "internal error (CommandError: ...); this is a bug in farm".
    Figure: exit 5, naming both revisions and what to do."""
    config = toy_farm(tmp_path)
    db = tmp_path / "results.db"
    _head_database(f"sqlite:///{db}")
    with sqlite3.connect(db) as connection:
        connection.execute("INSERT INTO alembic_version VALUES ('0016')")
    done = farm("show", "1", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 5, done.stdout + done.stderr
    assert "bug in farm" not in done.stderr and f"(0016, {HEAD})" in done.stderr, done.stderr


def _journal(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "0123456789ab.jsonl"
    path.write_text(text)
    return path


def test_an_older_farms_journal_of_an_unconfined_local_pass_certifies_nothing(tmp_path: Path) -> None:
    """Before: imported farm_writable false, a certificate; its own database, upgraded by 0016, said
    true. Figure: the import fills the flag by 0016's rule (an SSH node's stays false)."""
    local = OLD_JOURNAL.replace('"transport":"ssh"', '"transport":"local"')
    local = local.replace('"stage_details":{}', f'"stage_details":{json.dumps(UNCONFINED)}')
    for name, text_, writable in [("local", local, 1), ("ssh", local.replace('"local"', '"ssh"'), 0)]:
        folder = tmp_path / name
        folder.mkdir()
        store = Store(f"sqlite:///{folder / 'results.db'}")
        try:
            store.import_journal(_journal(folder, text_))
        finally:
            store.close()
        with sqlite3.connect(folder / "results.db") as db:
            found = db.execute("SELECT outcome, farm_writable FROM results WHERE variant = 'a'").fetchall()
        assert found == [("pass", writable)], name


def test_a_newer_farms_journal_with_a_field_this_farm_does_not_know_is_refused(tmp_path: Path) -> None:
    """Before: imported, the field dropped without a word. Figure: refused whole, naming the file,
    the record, the field and the farm version that wrote it; nothing stored."""
    newer = OLD_JOURNAL.replace('"real_gpu":true,"contract"', '"real_gpu":true,"certifies_nothing":true,"contract"')
    path = _journal(tmp_path, newer)
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        with pytest.raises(StoreError) as refused:
            store.import_journal(path)
    finally:
        store.close()
    said = str(refused.value)
    assert str(path) in said and "record 5 (result): certifies_nothing" in said and "'0.5.0'" in said, said
    with sqlite3.connect(tmp_path / "results.db") as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_this_farms_own_journal_still_imports(tmp_path: Path) -> None:
    """Every key the farm journals is one it knows (a journal of a toy farm's run, imported afresh)."""
    config = toy_farm(tmp_path)
    done = farm("verify", "--all", "--config", str(config), cwd=tmp_path)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    journals = sorted((tmp_path / "results.db.journal").glob("*.jsonl"))
    assert journals
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(journals[-1], fresh / journals[-1].name)
    store = Store(f"sqlite:///{fresh / 'results.db'}")
    try:
        (imported,) = [store.import_journal(fresh / journals[-1].name)]
    finally:
        store.close()
    assert imported.results > 0
