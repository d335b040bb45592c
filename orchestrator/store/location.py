"""Which file a SQLite URL names, however it is written.

`sqlite:///results.db`, `sqlite+pysqlite:///results.db` and
`sqlite:///results.db?timeout=30` are one database; so is a symbolic link to
it. The run lock and the journal folder are keyed on the file, not on the URL's
text: keyed on the text, two spellings took two locks, and two runs wrote one
database at once (the second marking the live one aborted).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import make_url
from sqlalchemy.exc import SQLAlchemyError


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL, as written (relative or not); None for a server
    database, an in-memory one, or a URL SQLAlchemy cannot read (the store's open
    says so)."""
    try:
        parsed = make_url(url)
        backend = parsed.get_backend_name()
    except (SQLAlchemyError, ValueError):
        return None
    if backend != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def real_sqlite_file(url: str) -> Path | None:
    """The file itself: absolute, symbolic links followed (the file need not exist yet)."""
    file = sqlite_file(url)
    return None if file is None else file.resolve()


# a server's port when a URL leaves it out
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433, "oracle": 1521}


def server_identity(url: str) -> str:
    """A server database as one string: backend (without its driver), host in lower
    case, port (the default filled in), database and user; the password and the query
    aside. farm.yaml's URL without a password and FARM_DATABASE's with it are one
    database: one lock, and its own site (found in review)."""
    try:
        parsed = make_url(url)
        backend = parsed.get_backend_name()
        port = parsed.port or DEFAULT_PORTS.get(backend)
    except (SQLAlchemyError, ValueError):
        return url
    return f"{backend}://{parsed.username or ''}@{(parsed.host or '').lower()}:{port or ''}/{parsed.database or ''}"


def same_database(url: str, other: str) -> bool:
    """Whether two URLs name one database: one SQLite file however each is spelled, else
    one server database (server_identity: driver, password and query aside)."""
    file, other_file = real_sqlite_file(url), real_sqlite_file(other)
    if file is not None or other_file is not None:
        return file == other_file
    return server_identity(url) == server_identity(other)


def several_names(url: str) -> str | None:
    """Why a SQLite file with more than one name (hard links) cannot be the farm's database:
    each name took its own run lock (beside it) and its own WAL files, so two farm roots on
    one file under two names ran at once, the second marking the live run aborted, or met
    SQLite's bare "disk I/O error" (a red-team finding). None for one name, or no file yet."""
    file = real_sqlite_file(url)
    try:
        links = file.stat().st_nlink if file is not None else 1
    except OSError:  # not there yet (made by this run), or unreadable: the open says so
        return None
    if links <= 1:
        return None
    return (
        f"{file} has {links} names (hard links): each takes its own run lock and its own WAL file, and "
        "two farms writing it at once corrupt it; keep one name and give the other farm that path "
        "(or a symbolic link to it)"
    )
