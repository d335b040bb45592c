"""farm.yaml's `database` (or --database, FARM_DATABASE) as the farm opens it: a relative
SQLite path resolved against farm.yaml, not wherever cron starts the farm, and a URL
refused before anything runs where its results would be lost (in memory) or land out of
the history's sight (a folder that does not exist)."""

from __future__ import annotations

import math
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from orchestrator.errors import ConfigError
from orchestrator.store.location import sqlite_file
from orchestrator.store.url_secrets import redact_url

# what a SQLite URL's query may set: the wait for a lock, nothing that changes which file opens or how
SQLITE_QUERY = frozenset({"timeout"})
# where a URL can come from besides farm.yaml: its errors name these, and no key in them
COMMAND_LINE = ("--database", "FARM_DATABASE")


def _key(where: str) -> str:
    return "" if where in COMMAND_LINE else "database"


def resolve_database(url: str, root: Path) -> str:
    # A relative SQLite path is relative to farm.yaml, not to wherever cron starts us,
    # however the URL is spelled (sqlite+pysqlite://); its query stays as written.
    file = sqlite_file(url)
    if file is None or file.is_absolute():
        return url
    return make_url(url).set(database=str((root / file).resolve())).render_as_string(hide_password=False)


def raw_at_problem(url: str, where: str) -> ConfigError | None:
    """A URL with a second `@` before its query: one in the password (or user, or database name) not
    written as %40. SQLAlchemy reads the password to the first `@` and the server's address from the
    rest, the masking to the last, so the driver's "failed to resolve host 'corpSecret99@db'" printed
    the password's tail in the clear (red-team 198). Said with the URL masked, before anything opens."""
    scheme, _sep, rest = url.partition("://")
    if scheme.split("+")[0].lower() == "sqlite" or rest.partition("?")[0].count("@") < 2:  # a path may hold @
        return None
    return ConfigError(
        where,
        _key(where),
        f"{redact_url(url)}, with an @ in its password, user or database name as it is (not as %40)",
        "each of them percent-encoded: @ as %40 (and / as %2F, : as %3A, % as %25), e.g. "
        "postgresql+psycopg://farm:p%40ss@db.example/farm for the password p@ss",
    )


def check_url(url: str, file: Path) -> None:
    """farm.yaml's `database` read as a URL now, not when the store opens it ('' or a blank before
    sqlite:// named neither file nor key; a NUL was "a bug in farm"); the URL is not shown, its
    password with it."""
    if (problem := raw_at_problem(url, str(file))) is not None:
        raise problem  # before make_url: its "invalid literal for int(): 'c@db'" quoted the password
    try:
        if "\0" in url:
            raise ValueError("a NUL character, which no path or address can carry")
        make_url(url)
    except (ArgumentError, ValueError) as err:
        found = f"a URL that cannot be read ({err})"
        raise ConfigError(
            str(file), "database", found, "a URL such as sqlite:///results.db or postgresql+psycopg://..."
        ) from None


def check_database_folder(url: str, where: str) -> None:
    """A SQLite database's folder must exist: the farm makes the file, never its
    folder. Else a typo or a disk not mounted that night would put the run's
    results (and its lock and journal) in a new folder of their own, out of the
    history's sight."""
    try:
        parsed = make_url(url)
        in_memory = parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")
    except Exception:  # not a URL SQLAlchemy reads: the store's open says so
        in_memory = False
    if in_memory:
        # an in-memory database: every result gone with the process, and the nodes' folders made first
        raise ConfigError(
            where,
            _key(where),
            redact_url(url),  # these errors reach --log and the cron mail: no password in them (round 104)
            "a database file (sqlite:///results.db) or a server (postgresql+psycopg://...); "
            "an in-memory database keeps nothing",
        )
    file = sqlite_file(url)
    if file is None:
        return
    if unread := sorted(set(parsed.query) - SQLITE_QUERY):
        # `uri=true` opened `file:r.db?mode=rwc` as another file than the one the lock and journal
        # were kept beside, and `mode=ro` was ignored: the run wrote a database asked read-only
        raise ConfigError(
            where,
            _key(where),
            f"{redact_url(url)}, whose query sets {', '.join(unread)}",
            "a SQLite file by its path, e.g. sqlite:///results.db or sqlite:///results.db?timeout=30 "
            "(the farm writes it, and keeps its lock and journal beside it: no file: URI, uri or mode)",
        )
    check_sqlite_timeout(url, where)
    folder = file.parent
    if not folder.is_dir():
        raise ConfigError(
            where,
            _key(where),
            f"{redact_url(url)}, whose folder {folder} {'is not a folder' if folder.exists() else 'does not exist'}",
            "a database in an existing folder (the farm makes the file, not its folder: is a disk not mounted?)",
        )


def check_sqlite_timeout(url: str, where: str) -> None:
    """A SQLite URL's `timeout` is the seconds to wait for a lock: `?timeout=abc` was the store's
    bare "could not convert string to float: 'abc'", naming neither the key nor what it takes
    (red-team 77). Read-only commands check it too: they open the database as well."""
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() != "sqlite":
            return
    except Exception:  # not a URL SQLAlchemy reads: the store's open says so
        return
    value = parsed.query.get("timeout")
    if value is None:
        return
    try:
        seconds = float(value) if isinstance(value, str) else math.nan  # a tuple: the key given twice
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds) and seconds >= 0:
        return
    raise ConfigError(
        where,
        _key(where),
        f"{redact_url(url)}, whose timeout is {value!r}",
        "timeout, once, as a number of seconds to wait for a lock, e.g. sqlite:///results.db?timeout=30",
    )
