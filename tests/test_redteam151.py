"""Red-team round 151: the results store's schema upgrades and sessions on both backends, failing first.

1. A schema upgrade stopped half-way on SQLite (a full disk, an I/O error, Ctrl-C during 0016's
   UPDATE or 0017's CREATE INDEX) kept what its statements had done so far: pysqlite commits each
   DDL statement on its own, so 0016's ADD COLUMN (or 0017's DROP INDEX) stayed while
   alembic_version still named the older revision. Every later open re-ran that migration and
   failed ("duplicate column name: farm_writable", "no such index: ix_results_run_cell"): the
   database could not be opened again by any farm, and the error said nothing of the upgrade.
   PostgreSQL's DDL is transactional and was left whole.
2. A PostgreSQL URL with `options` of its own (the site's `-c statement_timeout=...`, a
   search_path) dropped the farm's `-c timezone=UTC`: its sessions ran in the server's or the
   database's zone, and the pages and JUnit timestamps (printed without a zone) showed local
   times where every other farm on that database shows UTC.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.operations import Operations
from sqlalchemy import Engine, create_engine, inspect, make_url, text
from sqlalchemy.exc import OperationalError
from test_store_backends import (  # noqa: F401 (fixtures)
    BACKENDS,
    HEAD,
    RUN_FIELDS,
    alembic_config,
    postgres_admin,
    postgres_url,
)

from orchestrator.errors import StoreError
from orchestrator.store.database import Store


def _at(url: str, revision: str) -> None:
    """The database at an earlier farm's schema, as that farm left it."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def _revision_and_columns(url: str) -> tuple[str, set[str], set[str]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
            found = inspect(connection)
            columns = {c["name"] for c in found.get_columns("results")}
            indexes = {i["name"] for i in found.get_indexes("results")}
        return revision, columns, indexes
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("start", ["0015", "0016"])
def test_an_upgrade_that_fails_half_way_leaves_the_older_schema_whole_and_says_so(
    tmp_path: Path, backend: str, start: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = request.getfixturevalue("postgres_url") if backend == "postgresql" else f"sqlite:///{tmp_path / 'r.db'}"
    _at(url, start)
    before = _revision_and_columns(url)

    def disk_full(self: Operations, *args: object, **kwargs: object) -> None:
        # the last statement of both 0016 and 0017: everything before it has run
        raise OperationalError("CREATE INDEX", {}, OSError(28, "No space left on device"))

    with monkeypatch.context() as patched:
        patched.setattr(Operations, "create_index", disk_full)
        with pytest.raises(StoreError) as info:
            Store(url)
    assert _revision_and_columns(url) == before  # not one statement of the upgrade stayed
    said = str(info.value)
    assert "No space left on device" in said and f"from {start} to {HEAD}" in said, said
    assert f"left at {start}" in said and "farm verify" in said, said
    store = Store(url)  # the cause gone, the next open upgrades it
    try:
        assert store.begin_run(**RUN_FIELDS) == 1
    finally:
        store.close()
    revision, columns, _ = _revision_and_columns(url)
    assert revision == HEAD and "farm_writable" in columns


def test_a_postgresql_url_with_options_of_its_own_still_runs_its_sessions_in_utc(
    postgres_url: str,  # noqa: F811
    postgres_admin: Engine,  # noqa: F811
) -> None:
    name = make_url(postgres_url).database
    with postgres_admin.connect() as connection:
        connection.execute(text(f"ALTER DATABASE \"{name}\" SET timezone = 'America/New_York'"))
    url = f"{postgres_url}?options=-c%20statement_timeout%3D60000"  # the site's statement timeout
    store = Store(url)
    try:
        store.begin_run(**RUN_FIELDS)
        (run,) = store.runs()
        assert run.started_at.utcoffset() == timedelta(0), run.started_at
        with store.engine.connect() as connection:
            assert connection.execute(text("SHOW statement_timeout")).scalar_one() == "1min"  # theirs still holds
            assert connection.execute(text("SHOW timezone")).scalar_one() == "UTC"
    finally:
        store.close()


def test_a_refused_database_is_not_left_open(tmp_path):
    """A Store refused for its schema revision (a newer farm's) closed its engine's connection
    at once: it was left to the garbage collector, the file open in the farm's process (a leftover
    of round 151)."""
    import gc
    import os

    path = tmp_path / "results.db"
    Store(f"sqlite:///{path}").close()
    db = sqlite3.connect(path)  # its `with` commits but does not close
    db.execute("UPDATE alembic_version SET version_num='9999'")
    db.commit()
    db.close()

    def open_here() -> bool:
        fds = Path("/proc/self/fd")
        return any(os.path.realpath(fd) == str(path) for fd in fds.iterdir() if fd.is_symlink())

    gc.disable()
    try:
        with pytest.raises(StoreError, match="written by a newer farm"):
            Store(f"sqlite:///{path}")
        assert not open_here()
    finally:
        gc.enable()
