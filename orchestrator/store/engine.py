"""Opening a results database: its engine with each backend's settings, its schema
brought to this farm's (Alembic), and its URL's secrets kept out of every message.

SQLite runs in WAL mode with a 30 s busy timeout (the URL's `timeout` where it has one); PostgreSQL sessions run in UTC,
UTF-8, ISO dates and exact floats (whatever the URL's own `options` or the role's settings), connect with a
10 s timeout and check a pooled connection before use;
a session whose server stops answering is found and cut (liveness.py). A new
database gets the farm's schema at once; one an earlier farm wrote is upgraded in
place (by `farm verify` only), in one transaction on both backends; one a newer farm wrote is refused.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event, inspect, make_url, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from orchestrator.errors import StoreError
from orchestrator.store.liveness import server_engine
from orchestrator.store.tables import Base, Meta
from orchestrator.store.url_secrets import redact_url as redact_url  # the callers' import, as before
from orchestrator.store.url_secrets import url_secrets

MIGRATIONS = Path(__file__).parent / "migrations"
FIRST_SCHEMA = "0001"  # databases made before the farm used Alembic have this schema
FIRST_TABLES = {"farm_meta", "runs", "source_files", "node_snapshots", "results"}  # 0001's, all a 0.1.0 farm made
CONNECT_TIMEOUT = 10  # seconds, for server databases (PostgreSQL)
BUSY_MAX_MS = 2**31 - 1  # SQLite's busy_timeout is a C int of milliseconds (about 24.8 days)
MIGRATION_LOCK = 0x6661726D  # "farm": PostgreSQL advisory lock serialising concurrent migrations


def _sqlite_pragmas(dbapi_connection, _record, busy_ms: int = 30000) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={int(busy_ms)}")  # first: the pragmas below may wait for a lock
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _scrub(message: str, url: str) -> str:
    """An error message with the URL's passwords masked, wherever a driver echoed them."""
    message = message.replace(url, redact_url(url))
    for secret in sorted(url_secrets(url), key=len, reverse=True):
        if len(secret) >= 4:
            message = message.replace(secret, "***")
    return message


def check_url(url: str) -> None:
    """StoreError where SQLAlchemy cannot read URL (or its port is no number): the user's to
    fix, said before anything opens it (the run lock read a bad port as "a bug in farm")."""
    try:
        make_url(url).port  # noqa: B018 - reading it is the check
    except (SQLAlchemyError, ValueError) as err:
        raise StoreError(
            f"the results database URL {redact_url(url)!r} cannot be read ({first_line(err, url)}): "
            "expected e.g. sqlite:///results.db or postgresql+psycopg://user:password@host/db"
        ) from None


def first_line(err: BaseException, url: str) -> str:
    lines = str(err).strip().splitlines()
    # the hint after the scrub: it holds no secret, and a password "farm" had masked its words
    return _scrub(f"{err.__class__.__name__}: {lines[0] if lines else ''}", url) + _read_only_hint(err)


# what to do about a server setting that stopped the farm's statement, by SQLSTATE (and the words that tell
# a timeout from a DBA's cancel): the driver's words named no setting (red-team 218, 242)
HINTS = {
    "25006": (
        "",
        " (the server takes no writes from this session: default_transaction_read_only is on for the URL's role "
        "or its database, a DBA's ALTER ROLE/DATABASE ... SET default_transaction_read_only = on, undone by "
        "ALTER ROLE/DATABASE ... RESET default_transaction_read_only; or it is a hot standby: point `database` "
        "at the primary)",
    ),
    "57014": (
        "statement timeout",
        " (the server's statement_timeout, set for the URL's role or its database or in the URL's options, cut the "
        "farm's statement: ALTER ROLE/DATABASE ... RESET statement_timeout, or a URL option "
        "options=-c%20statement_timeout%3D0 for the farm's sessions alone)",
    ),
    "3F000": (
        "",
        " (the session's search_path names no schema that exists: the URL's role or its database has a "
        "search_path set (ALTER ROLE/DATABASE ... SET search_path) or the URL's options give one; RESET it, "
        "or name the schema that holds the farm's tables)",
    ),
}


def _read_only_hint(err: BaseException) -> str:
    """What to do about a server setting that refused the statement (HINTS), or ""."""
    state = getattr(getattr(err, "orig", err), "sqlstate", None)
    words, hint = HINTS.get(state or "", ("", ""))
    return hint if state in HINTS and words in str(err) else ""


def open_engine(url: str, stopped: Callable[[], object] = lambda: None) -> Engine:
    """An engine with each backend's settings (see the module's docstring); `stopped()`, not None
    once the run is stopped (liveness.py)."""
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        engine = create_engine(url)
        # the URL's `timeout` (seconds; README: `?timeout=30`) is the wait for a lock: a fixed 30 s
        # here overrode the driver's, so `?timeout=300` gave up after 30 s (red-team 85)
        wait = make_url(url).query.get("timeout")
        # checked finite and >= 0 at load; capped before the product: `?timeout=1e307` overflowed it
        busy_ms = round(min(float(wait), BUSY_MAX_MS / 1000) * 1000) if isinstance(wait, str) else 30000
        event.listen(engine, "connect", functools.partial(_sqlite_pragmas, busy_ms=busy_ms))
        return engine
    connect_args: dict[str, Any] = {}
    if backend == "postgresql":
        query = make_url(url).query
        if "connect_timeout" not in query:
            connect_args["connect_timeout"] = CONNECT_TIMEOUT
        # appended to the URL's own options (a site's statement_timeout, a search_path), last so it wins:
        # with options of its own a session ran in the server's zone, pages printing local times (red-team 151)
        # and in UTF-8: a DBA's client_encoding (ALTER ROLE farm SET client_encoding = 'LATIN1', an SQL_ASCII
        # database's default) could not carry a kernel's "✓" or the U+FFFD of a NUL; psycopg's encoder
        # raised outside the store's errors, the pass stored infra-error, the run exit 70 (red-team 218);
        # values printed as psycopg reads them back: a DBA's DateStyle 'SQL, DMY' made every time unreadable
        # (no report, exit 70), extra_float_digits -15 read a metric's 1234.57 as 1000.0 (red-team 233)
        own = query.get("options", ())
        forced = ["-c timezone=UTC", "-c client_encoding=UTF8", "-c datestyle=ISO", "-c extra_float_digits=3"]
        connect_args["options"] = " ".join([*([own] if isinstance(own, str) else own), *forced])
        # keepalives and a watchdog: a server that stops answering an open session is found (liveness.py)
        return server_engine(url, connect_args, stopped, pool_pre_ping=True)
    return create_engine(url, connect_args=connect_args, pool_pre_ping=True)


def farm_tables(path: Path) -> bool:
    """Whether the SQLite file holds the farm's tables, read without writing a byte (an
    empty file, another program's database, say no)."""
    try:
        with contextlib.closing(sqlite3.connect(path.absolute().as_uri() + "?mode=ro", uri=True)) as db:
            names = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:  # no SQLite file at all, or locked: the engine's to report, as before
        return True
    return bool(names & {"runs", "alembic_version"})


def _alembic_config() -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


@functools.cache
def _scripts() -> ScriptDirectory:
    """The migrations, read once per process: each read imports every revision's file
    (about 15 ms), and a database at this farm's head needs nothing more of them."""
    return ScriptDirectory.from_config(_alembic_config())


def migrate(engine: Engine, url: str, create: bool = True) -> None:
    """Bring the database to this farm's schema: create it when empty (and `create`),
    upgrade it in place when an earlier farm wrote it, refuse it when a newer one
    did. A command that only reads (`create=False`) writes no schema at all: not into
    a database that holds none of the farm's (an empty file, another program's), nor
    an upgrade into one an earlier farm wrote (that farm, still running the nightly
    runs, would then refuse it: an upgrade is `farm verify`'s, not a reader's)."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # two farms opening one new server database at once: one migrates, the other then finds it done
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        config = _alembic_config()
        config.attributes["connection"] = connection
        scripts = _scripts()
        context = MigrationContext.configure(connection)
        current = _revision(context, url)
        if current is not None and current == scripts.get_current_head():
            return  # this farm's schema already: what every run but the first finds
        known = {script.revision for script in scripts.walk_revisions()}
        present = set(inspect(connection).get_table_names())
        if connection.dialect.name == "sqlite":
            # one transaction for whatever is written below, as PostgreSQL's DDL is: pysqlite commits each
            # DDL statement on its own, so an upgrade stopped half-way kept its ADD COLUMN or DROP INDEX
            # under the older revision, and every later open re-ran it and failed (red-team 151); and a
            # new database's whole schema in one journal sync (it took 18 ms, 10 ms so)
            connection.exec_driver_sql("BEGIN")
        if current is None and "runs" in present:
            _refuse_lost(url, present)
            if not create:
                _refuse_older(url, "none (a farm from before schema revisions wrote it)", scripts)
            command.stamp(config, FIRST_SCHEMA)
            current = FIRST_SCHEMA
        if current is None and create and not present & set(Base.metadata.tables):
            # a new database gets this farm's schema at once, not by replaying every migration
            # (0.1-0.2 s on the first run's critical path, and on every test's fresh database);
            # the tests hold the two to the same schema (test_store.py). No table is taken as
            # already there: another program's table of one of these names is an error here,
            # as it is in the migrations
            _refuse_elsewhere(connection, url)
            Base.metadata.create_all(connection, checkfirst=False)
            # and the rows a migration seeds on an empty database (0011: every value is a baseline)
            connection.execute(Meta.__table__.insert(), [{"key": "metric_baseline_from", "value": "1"}])
            context.stamp(scripts, "head")
            return
        if current is None and not create:
            raise StoreError(
                f"{redact_url(url)} holds no farm results (none of its tables is the farm's); nothing was "
                "written to it: point --database or farm.yaml's `database` at the farm's own, or run `farm verify`"
            )
        if current is not None and current not in known and not _farms(current):
            raise StoreError(
                f"the results database {redact_url(url)} has schema revision {current!r}, which no farm wrote "
                f"(the farm's are numbered 0001 to {scripts.get_current_head()}): another program's Alembic "
                "table (alembic_version) in the same database? Nothing was written to it: give the farm a "
                "database of its own (--database, farm.yaml's `database`)"
            )
        if current is not None and current not in known:
            raise StoreError(
                f"the results database {redact_url(url)} has schema revision {current}, written by a newer "
                f"farm; this farm knows revisions up to {scripts.get_current_head()}. "
                "Upgrade the farm."
            )
        if not create:
            _refuse_older(url, current, scripts)
        try:
            command.upgrade(config, "head")
        except SQLAlchemyError as err:
            # the transaction rolls back whole on both backends: the older schema stays as it was
            raise StoreError(
                f"cannot open the results database {redact_url(url)}: upgrading its schema from {current or 'none'} "
                f"to {scripts.get_current_head()} failed ({first_line(err, url)}); nothing of the upgrade was kept, "
                f"it is left at {current or 'none'}: remove the cause and run `farm verify` again"
            ) from err


def _refuse_elsewhere(connection: Connection, url: str) -> None:
    """On PostgreSQL, a database whose farm tables lie in a schema this session's search_path does not
    reach: a DBA's ALTER ROLE/DATABASE ... SET search_path = other made the farm create a second, empty
    schema there and store the night's run in it, the fleet's history and certificates gone from every
    page (red-team 242). Refused, nothing written."""
    if connection.dialect.name != "postgresql":
        return
    query = (
        "SELECT string_agg(DISTINCT table_schema, ', ') FROM information_schema.tables WHERE table_name = "
        "'alembic_version' AND table_schema IN (SELECT table_schema FROM information_schema.tables "
        "WHERE table_name = 'runs') AND table_schema IS DISTINCT FROM current_schema()"
    )
    found = connection.execute(text(query)).scalar()
    if found:
        path = connection.execute(text("SHOW search_path")).scalar()
        raise StoreError(
            f"the results database {redact_url(url)} holds the farm's tables in schema {found}, which this "
            f"session's search_path ({path}) does not reach: the URL's role or its database has a search_path "
            "set (ALTER ROLE/DATABASE ... SET search_path) or the URL's options give one. Nothing was written: "
            "RESET it, or put that schema first in it (options=-c%20search_path%3DSCHEMA in the URL)"
        )


def _farms(revision: str) -> bool:
    """Whether a revision is numbered as the farm's are (0001, 0002, ...): one that is not is another
    program's, never "a newer farm's" (red-team 215)."""
    return len(revision) == 4 and revision.isdigit()


def _revision(context: MigrationContext, url: str) -> str | None:
    """The database's one revision; StoreError where alembic_version holds several (an edit, a
    restore merged into it): Alembic's own error was "a bug in farm", exit 70 (red-team 215)."""
    heads = context.get_current_heads()
    if len(heads) > 1:
        raise StoreError(
            f"the results database {redact_url(url)} has {len(heads)} schema revisions in its alembic_version "
            f"table ({', '.join(sorted(heads))}), where the farm writes one; nothing was written to it: keep the row "
            "of the revision its tables are at (DELETE the others), or restore it from a backup"
        )
    return heads[0] if heads else None


def _refuse_lost(url: str, present: set[str]) -> None:
    """A database with no revision is one from before the farm had any (0.1.0: 0001's five tables), to
    be stamped 0001 and upgraded. One that also holds a later revision's tables lost its alembic_version
    row (an edit, a partial restore): taken for 0001, its upgrade failed on every start, "table attempts
    already exists", and said it was left at 0001 (red-team 215)."""
    later = sorted(present & set(Base.metadata.tables) - FIRST_TABLES)
    if later:
        raise StoreError(
            f"the results database {redact_url(url)} has no schema revision (its alembic_version table is empty "
            f"or gone), yet it holds tables later farms made ({', '.join(later)}): its revision record was lost, "
            "and no farm can tell which revision its tables are at. Nothing was written to it: restore it (or "
            "its alembic_version) from a backup, or, knowing the revision of the farm that wrote it, "
            "`FARM_DATABASE=URL alembic -c orchestrator/store/migrations/alembic.ini stamp REVISION`"
        )


def _refuse_older(url: str, current: str, scripts: ScriptDirectory) -> NoReturn:
    raise StoreError(
        f"the results database {redact_url(url)} has schema revision {current}, older than this farm's "
        f"{scripts.get_current_head()}; a command that only reads does not upgrade it: `farm verify` "
        "upgrades it (back it up first: the farm that wrote it cannot read it after), or use the farm "
        "that wrote it"
    )
