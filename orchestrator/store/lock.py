"""One farm run at a time per results database.

Two `farm verify` runs writing one database would race (and a cron run
overlapping a hand run is the usual way it happens). The lock is a file beside
the SQLite database (or, for a server database, in the farm's folder, named by
the URL), taken with filelock: the OS releases it when the process dies, even
by SIGKILL, so a crashed run never leaves a stale lock behind. A second run
waits up to --wait seconds, then exits with a message naming the holder.

A folder whose filesystem has no file locks (NFS without its lock daemon, GlusterFS, some FUSE
mounts) cannot hold it, and a run there unlocked could write the database beside another: the
run stops, naming the folder and farm.yaml's `lock_dir`, a local folder for the lock instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock, Timeout

from orchestrator.errors import LockError
from orchestrator.store.engine import check_url
from orchestrator.store.location import real_sqlite_file, server_identity
from orchestrator.store.lock_files import MODE, NO_LOCKS, held_by_another_program, not_writable, recorded_holder


def lock_path(database_url: str, farm_root: Path, lock_dir: Path | None = None) -> Path:
    """Beside the SQLite file itself (links followed, the URL's spelling and query
    ignored: one file, one lock), else in the farm's folder, named by the server
    database (its password, driver and query aside: location.server_identity).
    With farm.yaml's `lock_dir`, in that folder, named by the database either way."""
    file = real_sqlite_file(database_url)
    if file is not None and lock_dir is None:
        return file.with_name(file.name + ".lock")
    identity = str(file) if file is not None else server_identity(database_url)
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return (lock_dir or farm_root) / f".farm-{digest}.lock"


# seconds of the lock's wait between two looks at whether the command was stopped meanwhile
STOP_SLICE = 0.5


class RunLock:
    def __init__(self, path: Path, wait: float = 0.0, stopped: Callable[[], None] | None = None) -> None:
        self.path = path
        self.wait = wait
        self.stopped = stopped  # raises where a stop signal came during the wait (cli/prerun.py)
        self._lock = FileLock(str(path), mode=MODE)
        self._info = path.with_name(path.name + ".holder")

    def _acquire(self) -> None:
        """The lock, waited for up to `wait` seconds in slices: a SIGTERM during `--wait 600`
        behind another cron's run killed the farm with no word of it (round 93)."""
        if self.stopped is None:
            self._lock.acquire(timeout=self.wait)
            return
        deadline = time.monotonic() + self.wait
        while True:
            self.stopped()
            try:
                self._lock.acquire(timeout=min(STOP_SLICE, max(deadline - time.monotonic(), 0.0)))
                return
            except Timeout:
                if time.monotonic() >= deadline:
                    raise

    def __enter__(self) -> RunLock:
        try:
            self._acquire()
        except Timeout:
            holder, ended = self._holder()
            if ended:  # the record's farm run is gone, and the OS frees a dead process's lock: not a farm run's
                raise LockError(held_by_another_program(self.path, holder, self.wait)) from None
            raise LockError(
                f"another farm run holds {self.path} ({holder}); waited {self.wait:.0f} s. "
                "Let it finish, or pass --wait SECONDS to queue behind it."
            ) from None
        except OSError as err:  # a directory in its place, a read-only or missing folder (Timeout is one too)
            if err.errno in NO_LOCKS:  # unlocked, a second run could write the database beside this one
                raise LockError(
                    f"cannot take the run lock {self.path}: its folder {self.path.parent} is on a filesystem with "
                    f"no file locks ({err.strerror or err}; NFS without its lock daemon, GlusterFS, FUSE). Set "
                    "`lock_dir:` in farm.yaml to a local folder with file locks that every farm run of this "
                    "database uses (e.g. /var/lock/farm): it keeps apart the runs of the one host it is on, so run "
                    "them all from that host, or use PostgreSQL for a database several hosts write"
                ) from err
            why = not_writable(self.path, err) or f"{self.path}: {err.strerror or err}"
            raise LockError(f"cannot take the run lock {why}") from err
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        try:  # who holds it is a courtesy for the next run's message; group-writable as the lock is
            # never through a link planted in its place: it overwrote the file it named (a review finding)
            fd = os.open(self._info, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, MODE)
            with os.fdopen(fd, "w") as info:
                with contextlib.suppress(OSError):
                    os.fchmod(fd, MODE)  # umask aside
                info.write(json.dumps(me))
        except OSError:  # another user's: the last holder named as this one would mislead the next run
            with contextlib.suppress(OSError):
                self._info.unlink()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def _holder(self) -> tuple[str, bool]:
        return recorded_holder(self._info)


# "farm run" as a number: the PostgreSQL advisory lock every farm run of a database takes
ADVISORY_KEY = 0x6661726D_72756E
CHECK_EVERY = 1.0  # seconds between two checks that a held advisory lock's session is still alive
_HELD: dict[str, DatabaseLock] = {}  # server database (location.server_identity) -> its lock held here


def check_held(
    url: str, run_id: int | None = None, status: str = "running", connect_timeout: int | None = None
) -> None:
    """Before a write: where this process holds `url`'s advisory lock, that its session still
    holds it (see DatabaseLock.check), `run_id` the run this process writes (None before its
    start) and `status` the one it last stored for it; nothing else to check for SQLite or an
    unheld lock. `connect_timeout`: a new session's, where less than the lock's own 10 s (the
    store's while the server is away: outage.connect_timeout)."""
    held = _HELD.get(server_identity(url))
    if held is not None:
        held.connect_timeout = connect_timeout
        held.check(run_id, status)


def recheck_held(url: str) -> None:
    """The next check_held of `url`'s lock looks at its session whatever CHECK_EVERY says: a write
    tried again after the server came back (store/outage.py) must find the lock its own first."""
    held = _HELD.get(server_identity(url))
    if held is not None:
        held._checked = 0.0


class DatabaseLock:
    """One run per *server* database, whichever host the farm runs on: a
    PostgreSQL session-level advisory lock, held on a connection of its own for
    the whole run (released by the server when that connection ends, even if
    the farm is killed). Two farm hosts sharing one database no longer both
    write it. For SQLite the file lock beside the database is enough."""

    def __init__(self, url: str, wait: float = 0.0, stopped: Callable[[], None] | None = None) -> None:
        self.url = url
        self.wait = wait
        self.stopped = stopped  # as RunLock's
        self._connection = None
        self._engine = None
        self._checked = 0.0
        self._checking = threading.Lock()  # a run's writes come from several threads
        self._lost: str | None = None  # why this run may no longer write, once found: it stays so
        self.me = f"farm pid {os.getpid()} on {socket.gethostname()}"[:63]  # its sessions' application_name
        self._backend: int | None = None  # the server's pid of the session that took the lock last
        self.connect_timeout: int | None = None  # a new session's, where less than 10 s (check_held)

    def check(self, run_id: int | None = None, status: str = "running") -> None:
        """The server ends the lock's idle session (idle_session_timeout, pg_terminate_backend,
        a restart) without a word, and the lock with it: a second farm host then took it and
        wrote beside the run (a red-team finding). At most every CHECK_EVERY seconds, a round
        trip on the session; ended, the lock is taken again on a new one, or, another farm
        holding it, the run's writes stop (StoreError), as they do where another farm took the
        free lock and wrote meanwhile (see _written_meanwhile)."""
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        from orchestrator.errors import StoreError
        from orchestrator.store.engine import redact_url
        from orchestrator.store.outage import StoreUnreachable, transient

        with self._checking:
            if self._lost is not None:
                raise StoreError(self._lost)
            if self._engine is None or time.monotonic() - self._checked < CHECK_EVERY:
                return
            try:
                if self._connection is not None:
                    self._connection.execute(text("SELECT 1")).scalar()
                    self._connection.rollback()
                    self._checked = time.monotonic()
                    return
            except SQLAlchemyError:
                with contextlib.suppress(Exception):
                    self._connection.close()  # type: ignore[union-attr]
                self._connection = None
            try:
                self._connection = self._engine.connect()
                taken = self._take()
                self._connection.commit()
                written = self._written_meanwhile(run_id, status) if taken else None
            except SQLAlchemyError as err:
                if transient(err):  # the server gone (a restart): no farm holds its lock; looked at again later
                    with contextlib.suppress(Exception):
                        self._connection.close()  # type: ignore[union-attr]
                    self._connection = None
                    raise StoreUnreachable(
                        f"the run lock of {redact_url(self.url)} cannot be taken again: the server is unreachable"
                    ) from err
                taken, written = False, None
            if not taken and self._connection is not None and self._own_session_ending():
                raise StoreUnreachable(  # this run's own session, cut, not yet ended by the server
                    f"the run lock of {redact_url(self.url)} is still held by this run's own session cut by the server"
                )
            if not taken:  # for good: the session kept answered the next check, and the run's end wrote
                # over the close of the farm that held the lock, which its other threads' results joined (review 178)
                self._lost = (
                    f"the run lock of {redact_url(self.url)} was lost (the server ended its session) and another "
                    "farm run may hold it now: this run stops writing"
                )
                raise StoreError(self._lost)
            if written is not None:
                self._lost = (
                    f"the run lock of {redact_url(self.url)} was lost (the server ended its session) and another "
                    f"farm wrote the database before this run took it again ({written}): this run stops writing"
                )
                raise StoreError(self._lost)
            self._checked = time.monotonic()

    def _connecting(self, _dialect: object, _record: object, _args: object, params: dict[str, object]) -> None:
        if self.connect_timeout is not None:
            params["connect_timeout"] = min(10, self.connect_timeout)

    def _take(self) -> bool:
        """The lock, tried once on the lock's session; the server's pid of that session kept."""
        from sqlalchemy import text

        assert self._connection is not None
        query = text("SELECT pg_try_advisory_lock(:k), pg_backend_pid()")
        taken, backend = self._connection.execute(query, {"k": ADVISORY_KEY}).one()
        if taken:
            self._backend = backend
        return bool(taken)

    def _own_session_ending(self) -> bool:
        """Whether the lock's holder is this process's own earlier session (a server restart's cut
        session lingers a moment), not another farm's."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            holder = self._holder()
            assert self._connection is not None
            self._connection.rollback()
        except SQLAlchemyError:
            return False
        return holder is not None and holder[3] == self._backend

    def _written_meanwhile(self, run_id: int | None, expected: str = "running") -> str | None:
        """What another farm wrote while the lock was free, read on the lock's new session: a newer
        schema, a run after this one, this run no longer running (another farm's start marks it
        aborted, its cells not-run). Taken again without a look, the run wrote on into a run the
        database had closed and ended it finished (a red-team finding). `expected`: the status this
        process stored for it last; a bisection's next run follows its own finished one, and its
        own end read as another farm's stopped the walk (a review finding)."""
        from sqlalchemy import text

        from orchestrator.store.engine import _scripts

        assert self._connection is not None
        try:
            schema = self._connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
            newest = self._connection.execute(text("SELECT max(id) FROM runs")).scalar()
            status = self._connection.execute(text("SELECT status FROM runs WHERE id = :i"), {"i": run_id}).scalar()
        finally:
            self._connection.rollback()
        if schema != _scripts().get_current_head():
            return f"its schema is now revision {schema}"
        if run_id is not None and newest != run_id:
            return f"run {newest} is newer than this run {run_id}"
        if run_id is not None and status != expected:
            return f"it marked this run {run_id} {status or 'gone'}"
        return None

    def __enter__(self) -> DatabaseLock:
        from sqlalchemy import event
        from sqlalchemy.exc import SQLAlchemyError
        from sqlalchemy.pool import NullPool

        from orchestrator.errors import StoreError
        from orchestrator.store.engine import first_line, redact_url
        from orchestrator.store.liveness import server_engine

        me = self.me
        try:
            # keepalives and the watchdog as the store's (liveness.py): its SELECT 1 ran under the write lock
            self._engine = server_engine(self.url, {"application_name": me, "connect_timeout": 10}, poolclass=NullPool)
            event.listen(self._engine, "do_connect", self._connecting)
            event.listen(self._engine, "connect", _never_idle_ended)
            self._connection = self._engine.connect()
            deadline = time.monotonic() + self.wait
            while True:
                taken = self._take()
                self._connection.commit()
                if taken:
                    self._checked = time.monotonic()
                    _HELD[server_identity(self.url)] = self
                    return self
                if time.monotonic() >= deadline:
                    holder = self._holder()
                    self._release()
                    who = (
                        f"{holder[0] or 'a farm'} from {holder[1] or 'local'} since {holder[2]:%Y-%m-%d %H:%M}"
                        if holder
                        else "holder unknown"
                    )
                    raise LockError(
                        f"another farm run holds the advisory lock of {redact_url(self.url)} ({who}); "
                        f"waited {self.wait:.0f} s. Let it finish, or pass --wait SECONDS to queue behind it."
                    )
                if self.stopped is not None:
                    try:
                        self.stopped()
                    except BaseException:
                        self._release()
                        raise
                time.sleep(min(1.0, max(deadline - time.monotonic(), 0.05)))
        except SQLAlchemyError as err:
            self._release()
            # the driver's first line, secrets masked: its class name alone left a wrong password or a
            # refused connection unsaid (red-team 198)
            said = first_line(err, self.url)
            raise StoreError(f"cannot take the run lock of {redact_url(self.url)}: {said}") from err

    def _holder(self):
        """The advisory lock's holder in this database: (application_name, client_addr, backend_start, pid)."""
        from sqlalchemy import text

        assert self._connection is not None
        return self._connection.execute(
            text(
                "SELECT a.application_name, a.client_addr, a.backend_start, l.pid FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
                "AND l.granted AND (l.classid::bigint << 32 | l.objid::bigint) = :k "
                # advisory locks are per database: another database's farm on this server
                # holds its own, and was named as this one's holder (red-team 173)
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ),
            {"k": ADVISORY_KEY},
        ).first()

    def _release(self) -> None:
        # NullPool: closing the connection ends the server session, and with it the lock
        if _HELD.get(server_identity(self.url)) is self:
            del _HELD[server_identity(self.url)]
        if self._connection is not None:
            with contextlib.suppress(Exception):
                self._connection.close()
            self._connection = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __exit__(self, *exc: object) -> None:
        self._release()  # closing the session releases its advisory locks


def _never_idle_ended(dbapi_connection: object, _record: object) -> None:
    """The lock's session opts out of the DBA's idle_session_timeout (ALTER ROLE/DATABASE ... SET;
    PostgreSQL 14 on, and a setting any session may change for itself): idle through a long cell, the
    server ended it, and another farm host's start took the free lock and closed the live run, its
    kernels on shared nodes reaped (red-team 198). Committed: a rollback would undo it."""
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("SELECT set_config(name, '0', false) FROM pg_settings WHERE name = 'idle_session_timeout'")
    cursor.close()
    dbapi_connection.commit()  # type: ignore[attr-defined]


@contextlib.contextmanager
def run_lock(
    database_url: str,
    farm_root: Path,
    wait: float,
    lock_dir: Path | None = None,
    stopped: Callable[[], None] | None = None,
):
    """The file lock for this farm host (in `lock_dir`, farm.yaml's, where given), and for
    PostgreSQL the database's advisory lock. `stopped` is called while either is waited for,
    and raises where the command was stopped meanwhile."""
    check_url(database_url)  # a port that is no number was "a bug in farm" here (a red-team finding)
    with RunLock(lock_path(database_url, farm_root, lock_dir), wait, stopped):
        if database_url.startswith(("postgresql", "postgres")):
            with DatabaseLock(database_url, wait, stopped):
                yield
        else:
            yield
