"""The results database, through SQLAlchemy: runs, node snapshots, cell results.

Each cell's result is committed the moment it finishes, so a run killed half-way
keeps every finished cell. One writer at a time (a lock in this process; the
farm's run lock across processes). Readers never block the writer and only ever
see committed rows, whole: SQLite runs in WAL mode, PostgreSQL is MVCC. Reads
inside `with store.reading():` all see one snapshot of the database, so a report
rendered during a run shows the run as it was at one moment.

Backends: SQLite (`sqlite:///results.db`, the default) and PostgreSQL
(`postgresql+psycopg://user:password@host:5432/db`, psycopg 3). PostgreSQL
sessions run in UTC (times read back as SQLite's do), connect with a 10 s
timeout, and check a pooled connection before use (a restarted server is
reconnected to). Passwords never appear in error messages.

Sizes: stdout, stderr and build logs are stored as raw bytes (never decoded, so
nothing a kernel prints is lost or altered), each capped at farm.yaml's
`output_cap` (default 1 MiB); the full size is stored beside it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event, make_url, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from orchestrator.errors import StoreError
from orchestrator.store.binaries import RecordedBinaries, RunBinaries
from orchestrator.store.certifying import CertifyingQueries
from orchestrator.store.engine import check_url, farm_tables, first_line, migrate, open_engine, redact_url
from orchestrator.store.journal import Journal
from orchestrator.store.location import several_names, sqlite_file
from orchestrator.store.lock import check_held, recheck_held
from orchestrator.store.measurements import MeasurementQueries
from orchestrator.store.outage import STOP_LOOK, Outage, StoreUnreachable, stopped_of
from orchestrator.store.queries import Queries
from orchestrator.store.recording import Recording
from orchestrator.store.recovery import Recovery
from orchestrator.store.result_rows import run_status, stored
from orchestrator.store.tables import Attempt, Base, Meta, NodeSnapshotRow, ResultRow, Run
from orchestrator.store.waived import WaivedQueries

T = TypeVar("T")
# a read snapshot's transaction, kept from the server's timeouts of a transaction (Store.reading)
UNTIMED = text(
    "SELECT set_config(name, '0', true) FROM pg_settings "
    "WHERE name IN ('idle_in_transaction_session_timeout', 'transaction_timeout')"
)


class Store(Recording, Queries, CertifyingQueries, MeasurementQueries, Recovery, RecordedBinaries, WaivedQueries):
    """Opens (and creates) the database; every write commits at once."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        """`create=False` for commands that only read: a missing SQLite file is
        an error, never an empty database made as a side effect."""
        self.url = url
        self.redacted_url = redact_url(url)  # for messages
        check_url(url)  # once, here: a URL SQLAlchemy cannot read (or a port that is no number) is the user's
        self._write_lock = threading.Lock()
        self._pinned = threading.local()  # this thread's snapshot session, inside reading()
        self.journal: Journal | None = None  # a run's safety copy of every write (journal.py)
        self._snapshot_refs: dict[int, int] = {}
        # each node's thread journals its snapshot: refs counted under a lock, never len(_snapshot_refs),
        # which two nodes read alike before either registered (one ref, two snapshots: a red-team finding)
        self._refs = itertools.count(1)
        self._refs_lock = threading.Lock()
        self._binaries = RunBinaries()  # recorded binaries read (binaries.py), anew with each run begun
        self._run: tuple[int, str] | None = None  # the run this store writes and its status (lock.check_held)
        # a run's writes wait out a server gone for up to farm.yaml's store_wait (outage.py); 0: none do
        self.outage = Outage()
        self._looked_after = 0  # outage.failures at the run lock's last check (_check_file)
        self._closed: str | None = None  # why this run may no longer write, once found (_still_open): it stays so
        self._writer: Connection | None = None  # SQLite's writes' own connection, held between them (_writing_rows)
        if not create and make_url(url).get_backend_name() == "sqlite":
            path = make_url(url).database
            if path and path != ":memory:" and not Path(path).is_file():
                raise StoreError(f"no results database at {path}: run `farm verify` first")
            if path and path != ":memory:" and not farm_tables(Path(path)):
                # read-only, before the engine's first connection sets WAL mode in the file
                raise StoreError(
                    f"{path} holds no farm results (none of its tables is the farm's); nothing was written "
                    "to it: point --database or farm.yaml's `database` at the farm's own, or run `farm verify`"
                )
        if (problem := several_names(url)) is not None:
            raise StoreError(f"cannot open the results database {self.redacted_url}: {problem}")
        try:
            self.engine = open_engine(url, stopped_of(self.outage))
        except ImportError as err:
            raise StoreError(
                f"cannot open the results database {self.redacted_url}: its driver is not installed "
                f"({first_line(err, url)}); PostgreSQL's is psycopg: pip install 'psycopg[binary]'"
            ) from err
        except (SQLAlchemyError, ValueError) as err:
            raise StoreError(f"cannot open the results database {self.redacted_url}: {first_line(err, url)}") from err
        if self.engine.dialect.name == "postgresql":
            event.listen(self.engine, "do_connect", self._connecting)
        try:
            migrate(self.engine, url, create)
        except StoreError:  # a refused revision: its connection closed now, not by the garbage collector
            self.engine.dispose()
            raise
        except (SQLAlchemyError, OSError) as err:
            self.engine.dispose()
            said = first_line(err, url)
            folder = (sqlite_file(url) or Path(".")).resolve().parent
            if sqlite_file(url) is not None and "unable to open" in said and not os.access(folder, os.W_OK):
                # WAL mode: even a reader makes results.db-shm beside the file (found by a red-team helper)
                said += (
                    f"; its folder {folder} is read-only, and SQLite must write results.db-shm there even to "
                    "read: copy results.db* to a writable folder and give that copy with --database"
                )
            raise StoreError(f"cannot open the results database {self.redacted_url}: {said}") from err
        self._file = sqlite_file(url)
        self._identity = self._file_identity()

    def _file_identity(self) -> tuple[int, int] | None:
        if self._file is None:
            return None
        try:
            found = os.stat(self._file)
        except OSError:
            return None
        return (found.st_dev, found.st_ino)

    def _check_file(self) -> None:
        """SQLite keeps writing to a file that was deleted or replaced under it, and
        the results would be lost without a word: check before every commit."""
        if self._file is None:  # a server database: the run lock this process holds, still held
            failures = self.outage.failures  # under the write lock: one write checks at a time
            if failures != self._looked_after:  # a write failed since: another farm may have taken the lock
                recheck_held(self.url)
            check_held(self.url, *(self._run or (None, "running")), connect_timeout=self.outage.connect_timeout())
            self._looked_after = failures
            return
        if self._identity is None:
            return
        now = self._file_identity()
        if now != self._identity:
            what = "deleted" if now is None else "replaced by another file"
            raise StoreError(f"the results database {self._file} was {what} during the run{self._journal_hint()}")

    def _still_open(self, connection: Connection, run_id: int) -> None:
        """In a write of run `run_id`, its own transaction, before it commits: the run this store
        began still running. A farm whose lock session the server ended writes on for up to
        lock.CHECK_EVERY, and another farm's start may have closed its run meanwhile, completed
        from its journal (recovery.py): a result journaled before that start read the journal and
        committed after was stored twice (review 188). Read after the write's inserts: SQLite's
        write lock is held then, PostgreSQL's FOR SHARE waits for the closing start's row lock and
        keeps the row from its UPDATE until this commits. Refused, this run writes no more."""
        if self._run != (run_id, "running"):
            return  # its own end stored (a bisection's next run follows it), or no run of this store's
        status = run_status(connection, run_id)
        if status != "running":
            self._closed = (
                f"the run lock of {self.redacted_url} was lost and another farm run closed this run {run_id} "
                f"(it marked it {status or 'gone'}): this run stops writing"
            )
            raise StoreError(self._closed)

    def _ended(self, connection: Connection, run_id: int, end: dict[str, Any]) -> None:
        """Run `run_id`'s end (status, exit_code, ended_at) in the caller's transaction. The run this
        store began ends only where it still runs, in one UPDATE (PostgreSQL's waits for the closing
        start's row lock, then reads the row anew): its end wrote over another farm's close (review 188)."""
        update = Run.__table__.update().where(Run.__table__.c.id == run_id).values(**end)
        if self._run != (run_id, "running"):
            connection.execute(update)
            return
        if connection.execute(update.where(Run.__table__.c.status == "running")).rowcount == 0:
            self._still_open(connection, run_id)  # it says why, and stops the run's writes for good

    def _journal_hint(self) -> str:
        if self.journal is None:
            return ""
        return f"; this run's records are in its journal: farm import {self.journal.path}"

    def _retrying(self, write: Callable[[], T], landed: Callable[[], T | None]) -> T:
        """write() of a journaled record, tried again while the server is gone (outage.py); `landed`
        finds the rows of a try whose commit landed though its connection dropped. Past the wait,
        the error names the journal, as every failed write's does."""
        try:
            return self.outage.retrying(write, landed, lambda: recheck_held(self.url), self.redacted_url)
        except StoreError as err:
            if self.journal is None or "farm import" in str(err):
                raise
            raise StoreError(f"{err}{self._journal_hint()}") from err

    def _waited(self, read: Callable[[], T]) -> T:
        """A read the run itself makes mid-run (a node's cached binaries, a cell's metric baseline,
        its end's look for lost cells), waited out as its writes are: failing at once, a server's
        restart stopped the run through them (review 178). Inside reading(): as it is."""
        if getattr(self._pinned, "session", None) is not None:
            return read()
        return self._retrying(read, lambda: None)

    def recorded_binaries(self, node: str, build_keys: Sequence[str]) -> dict[str, str | None]:
        return self._waited(lambda: RecordedBinaries.recorded_binaries(self, node, build_keys))

    def metric_baseline(self, *args: Any, **kwargs: Any) -> dict[str, list[float]]:
        return self._waited(lambda: MeasurementQueries.metric_baseline(self, *args, **kwargs))

    def unfinished_cells(self, run_id: int) -> list[tuple[str, str, str, str]]:
        return self._waited(lambda: Recovery.unfinished_cells(self, run_id))

    def snapshots(self, run_id: int) -> list[NodeSnapshotRow]:
        return self._waited(lambda: Queries.snapshots(self, run_id))

    def results(self, run_id: int) -> list[ResultRow]:
        return self._waited(lambda: Queries.results(self, run_id))

    def _journal(self, kind: str, fields: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.write(kind, fields)

    def _journal_many(self, *records: tuple[str, dict[str, Any]]) -> None:
        """Records as the journal keeps them (no run_id: the journal is the run's), one sync."""
        if self.journal is not None:
            self.journal.write_many([(kind, {k: v for k, v in f.items() if k != "run_id"}) for kind, f in records])

    def session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        # a database failure mid-run (server gone, disk full) is a StoreError, password masked
        try:
            yield
        except (SQLAlchemyError, OSError) as err:
            raise StoreError(
                f"the results database {self.redacted_url} failed {doing}: {first_line(err, self.url)}"
                f"{self._journal_hint() if doing == 'writing' else ''}"
            ) from err

    @contextmanager
    def _write_turn(self) -> Iterator[None]:
        """The write lock, waited for in slices: while the server is away, a write behind another
        thread's try gives up once the run is stopped or the wait is over, never one try's
        connect_timeout per thread past it (review 182)."""
        while not self._write_lock.acquire(timeout=STOP_LOOK):
            if self.outage.expired():
                raise StoreUnreachable(f"the results database {self.redacted_url} is unreachable (a write waited)")
        try:
            yield
        finally:
            self._write_lock.release()

    def _connecting(self, _dialect: Any, _record: Any, _args: Any, params: dict[str, Any]) -> None:
        """A new connection's timeout, as outage.connect_timeout says while the server is away."""
        cap = self.outage.connect_timeout()
        if cap is not None:
            params["connect_timeout"] = min(int(params.get("connect_timeout", cap)), cap)

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        with self._guard("writing"), self._write_turn(), self.session() as session:
            self._check_file()
            yield session

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        pinned = getattr(self._pinned, "session", None)
        if pinned is not None:
            yield pinned
            return
        with self._guard("reading"), self.session() as session:
            yield session

    @contextmanager
    def reading(self) -> Iterator[Store]:
        """Every read in this block (this thread) sees one snapshot of the database,
        as it was at the block's first read: a report rendered during a run is of one
        moment, never some cells of it from before a commit and some from after.
        Never blocks the writer (SQLite: one WAL read transaction; PostgreSQL: one
        REPEATABLE READ, READ ONLY transaction)."""
        if getattr(self._pinned, "session", None) is not None:
            yield self
            return
        with self._guard("reading"), self.session() as session:
            if self.engine.dialect.name == "sqlite":
                # pysqlite opens no transaction for SELECTs: open one, so they share a snapshot
                session.connection().exec_driver_sql("BEGIN")
            elif self.engine.dialect.name == "postgresql":
                connection = session.connection(
                    execution_options={"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}
                )
                # the snapshot is held while pages render between its reads: a DBA's
                # idle_in_transaction_session_timeout (or PostgreSQL 17's transaction_timeout) ended the
                # session mid-render, the report never written and `farm verify` a traceback, exit 70
                # (red-team 242). Off for this transaction alone (SET LOCAL; any session may), where present
                connection.execute(UNTIMED)
            self._pinned.session = session
            try:
                yield self
            finally:  # closing ends the transaction; what was read stays loaded (no expiry)
                self._pinned.session = None

    @contextmanager
    def _writing_rows(self) -> Iterator[Connection]:
        """One transaction for inserts (Core's, or inserts.py's on its connection), committed on leaving.
        SQLite's writes (one at a time: the write lock) share one connection, held between them: the
        pool's checkout and return were a seventh of a result's write (issue 11). One whose transaction
        failed goes back to the pool, and the next write takes another. PostgreSQL's each check one out
        of the pool, whose pre-ping finds a connection the server's restart broke before it is used."""
        with self._guard("writing"), self._write_turn():
            if self.engine.dialect.name != "sqlite":
                with self.engine.begin() as connection:
                    self._check_file()
                    yield connection
                return
            connection = self._writer
            if connection is None or connection.closed or connection.invalidated:
                connection = self._writer = self.engine.connect()
            try:
                with connection.begin():
                    self._check_file()
                    yield connection
            except BaseException:
                self._writer = None
                with contextlib.suppress(SQLAlchemyError):  # the write's own error is the one to say
                    connection.close()
                raise

    def _add(self, table: type[Base], fields: dict[str, Any]) -> int:
        """One row of `table` (an ORM model) of a run, committed; returns its id."""
        fields = stored(table.__table__, fields)  # see stored
        with self._writing_rows() as connection:
            added = connection.execute(table.__table__.insert(), fields).inserted_primary_key[0]
            self._still_open(connection, fields["run_id"])
            return added

    def database_identity(self) -> str:
        """What tells this database from another in its place (a fresh results.db, run ids from 1
        again): its `database_id` (tables.SEED_DATABASE_ID), or for one whose runs an older farm
        wrote, its first run's token and start; "" while it has no run."""
        with self._reading() as session:
            found = session.scalar(select(Meta.value).where(Meta.key == "database_id"))
            if found:
                return f"id {found}"
            first = session.scalars(select(Run).order_by(Run.id).limit(1)).first()
            return f"run {first.id} {first.token} {first.started_at.isoformat()}" if first is not None else ""

    def run_mark(self, run_id: int | None = None) -> str | None:
        """What tells run `run_id` (default: the newest) from another run of that id: its id, token
        and start; None where there is none. A site records its database's newest (site_identity.py):
        results.db restored from an older backup of itself keeps its database_id, not the later runs."""
        with self._reading() as session:
            query = select(Run).where(Run.id == run_id) if run_id is not None else select(Run).order_by(Run.id.desc())
            run = session.scalars(query.limit(1)).first()
            return f"run {run.id} {run.token} {run.started_at.isoformat()}" if run is not None else None

    def result_mark(self, result_id: int | None = None) -> str | None:
        """Result `result_id` (default: the newest) as "result ID of run N"; None where there is none.
        A backup taken mid-run holds the site's newest run, not the results stored after it."""
        with self._reading() as session:
            query = select(ResultRow.id, ResultRow.run_id).order_by(ResultRow.id.desc())
            if result_id is not None:
                query = query.where(ResultRow.id == result_id)
            row = session.execute(query.limit(1)).first()
            return f"result {row[0]} of run {row[1]}" if row is not None else None

    def attempts(self, run_id: int) -> list[Attempt]:
        with self._reading() as session:
            query = select(Attempt).where(Attempt.run_id == run_id).order_by(Attempt.id)
            return list(session.scalars(query))

    # writes: recording.Recording; reads: queries.Queries, certifying.CertifyingQueries,
    # measurements.MeasurementQueries

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        self.engine.dispose()
