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

import itertools
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import make_url, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from orchestrator.errors import StoreError
from orchestrator.store.binaries import RecordedBinaries, RunBinaries
from orchestrator.store.certifying import CertifyingQueries
from orchestrator.store.engine import check_url, farm_tables, first_line, migrate, open_engine, redact_url
from orchestrator.store.journal import Journal
from orchestrator.store.location import several_names, sqlite_file
from orchestrator.store.lock import check_held
from orchestrator.store.measurements import MeasurementQueries
from orchestrator.store.queries import Queries
from orchestrator.store.records import AttemptRecord, ResultRecord, SnapshotRecord
from orchestrator.store.recovery import Recovery
from orchestrator.store.result_rows import INSERT_PLANNED, insert_node, insert_result, stored
from orchestrator.store.tables import (
    SEED_DATABASE_ID,
    Attempt,
    Base,
    Meta,
    NodeSnapshotRow,
    PlannedCell,
    ResultRow,
    Run,
    SourceFile,
)
from orchestrator.store.waived import WaivedQueries


class Store(Queries, CertifyingQueries, MeasurementQueries, Recovery, RecordedBinaries, WaivedQueries):
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
            self.engine = open_engine(url)
        except ImportError as err:
            raise StoreError(
                f"cannot open the results database {self.redacted_url}: its driver is not installed "
                f"({first_line(err, url)}); PostgreSQL's is psycopg: pip install 'psycopg[binary]'"
            ) from err
        except (SQLAlchemyError, ValueError) as err:
            raise StoreError(f"cannot open the results database {self.redacted_url}: {first_line(err, url)}") from err
        try:
            migrate(self.engine, url, create)
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
            check_held(self.url, *(self._run or (None, "running")))
            return
        if self._identity is None:
            return
        now = self._file_identity()
        if now != self._identity:
            what = "deleted" if now is None else "replaced by another file"
            raise StoreError(f"the results database {self._file} was {what} during the run{self._journal_hint()}")

    def _journal_hint(self) -> str:
        if self.journal is None:
            return ""
        return f"; this run's records are in its journal: farm import {self.journal.path}"

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
    def _writing(self) -> Iterator[Session]:
        with self._guard("writing"), self._write_lock, self.session() as session:
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
                session.connection(
                    execution_options={"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}
                )
            self._pinned.session = session
            try:
                yield self
            finally:  # closing ends the transaction; what was read stays loaded (no expiry)
                self._pinned.session = None

    @contextmanager
    def _writing_rows(self) -> Iterator[Connection]:
        """One transaction for inserts (Core's, or inserts.py's on its connection), committed on leaving."""
        with self._guard("writing"), self._write_lock, self.engine.begin() as connection:
            self._check_file()
            yield connection

    def _add(self, table: type[Base], fields: dict[str, Any]) -> int:
        """One row of `table` (an ORM model), committed; returns its id."""
        fields = stored(table.__table__, fields)  # see stored
        with self._writing_rows() as connection:
            return connection.execute(table.__table__.insert(), fields).inserted_primary_key[0]

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

    # writes ------------------------------------------------------------------
    def begin_run(
        self,
        planned: Sequence[tuple[str, str, str, str]] = (),
        sources: Sequence[tuple[str, str, bytes]] = (),
        **fields: Any,
    ) -> int:
        """A new run (its columns, `fields`), with the cells it plans (as add_planned) and
        its sources' files ((sha256, path, content), as add_source), in one journal
        write and one transaction: three commits and syncs were on every run's start."""
        started = datetime.now(UTC)
        records: list[tuple[str, dict[str, Any]]] = [("run", {"started_at": started, **fields})]
        if planned:
            records.append(("planned", {"cells": [list(cell) for cell in planned]}))
        records += [("source", {"sha256": sha, "path": path, "content": content}) for sha, path, content in sources]
        if self.journal is not None:
            self.journal.write_many(records)
        run_fields = {"started_at": started, "status": "running", **fields}
        try:
            with self._writing_rows() as connection:
                connection.execute(SEED_DATABASE_ID, {"id": uuid.uuid4().hex})  # with its first run: database_identity
                run_id = connection.execute(
                    Run.__table__.insert(), stored(Run.__table__, run_fields)
                ).inserted_primary_key[0]
                rows = [{"run_id": run_id, "kernel": k, "variant": v, "node": n, "device": d} for k, v, n, d in planned]
                if rows:
                    connection.execute(INSERT_PLANNED, [stored(PlannedCell.__table__, row) for row in rows])
                new = {sha: (path, content) for sha, path, content in sources}
                if new:
                    have = connection.scalars(select(SourceFile.sha256).where(SourceFile.sha256.in_(list(new))))
                    for sha in list(have):
                        del new[sha]
                if new:
                    kept = [
                        {"sha256": sha, "path": path, "content": content, "first_seen": started}
                        for sha, (path, content) in new.items()
                    ]
                    connection.execute(SourceFile.__table__.insert(), [stored(SourceFile.__table__, r) for r in kept])
        except StoreError as err:
            raise self.not_begun(err, fields.get("token")) from err
        self._run = (run_id, "running")
        self._binaries = RunBinaries(node for _, _, node, _ in planned)
        return run_id

    def finish_run(self, run_id: int, status: str, exit_code: int) -> None:
        """How the run ended, journal first; where the journal cannot take it (its disk
        full), the database is still told, and then the journal's error raised: a run
        left "running" reads as one whose farm died."""
        unjournaled: StoreError | None = None
        try:
            self._journal("finish", {"status": status, "exit_code": exit_code, "ended_at": datetime.now(UTC)})
        except StoreError as err:
            unjournaled = err
        with self._writing() as session:
            run = session.get(Run, run_id)
            assert run is not None
            run.status = status
            # the code the process returns: the journal's error's, where it could not take the end
            run.exit_code = exit_code if unjournaled is None else max(exit_code, unjournaled.exit_code)
            run.ended_at = datetime.now(UTC)
            session.commit()
            self._run = (run_id, status)  # its own end, never another farm's write (lock._written_meanwhile)
        if unjournaled is not None:
            raise unjournaled

    def add_snapshot(self, record: SnapshotRecord) -> int:
        ref = self._new_ref()
        fields = record.columns()
        self._journal("snapshot", {"ref": ref, **{k: v for k, v in fields.items() if k != "run_id"}})
        snapshot_id = self._add(NodeSnapshotRow, fields)
        self._snapshot_refs[snapshot_id] = ref
        return snapshot_id

    def add_result(
        self,
        record: ResultRecord,
        attempts: Sequence[AttemptRecord] = (),
        metrics: Sequence[dict[str, Any]] = (),
    ) -> int:
        """A cell's result, its metric values (metrics.Measured.record) and the
        attempts that led to it, in one transaction (and one journal write)."""
        ref = self._snapshot_refs.get(record.snapshot_id or 0)
        at = datetime.now(UTC)
        fields = record.columns()
        tries = [{"at": at, **a.columns()} for a in attempts]
        kept = {k: v for k, v in fields.items() if k not in ("run_id", "snapshot_id")}
        records: list[tuple[str, dict[str, Any]]] = [
            ("result", {"snapshot_ref": ref, **kept, **({"metrics": list(metrics)} if metrics else {})})
        ]
        records += [("attempt", {k: v for k, v in a.items() if k != "run_id"}) for a in tries]
        if self.journal is not None:
            self.journal.write_many(records)
        with self._writing_rows() as connection:
            result_id = insert_result(connection, fields, metrics, tries)
        # once committed: a result the database refused vouched for no cached build (binaries.py)
        self._binary_written(fields)
        return result_id

    def add_planned(self, run_id: int, cells: list[tuple[str, str, str, str]]) -> None:
        """(kernel, variant, node, device) of cells a run sets out to do; a node's
        cells are planned again per card model once its probe found several."""
        self._journal("planned", {"cells": [list(cell) for cell in cells]})
        if not cells:
            return
        rows = [{"run_id": run_id, "kernel": k, "variant": v, "node": n, "device": d} for k, v, n, d in cells]
        with self._writing_rows() as connection:  # one executemany: the ORM's objects cost 1.4 ms a cell (profiled)
            connection.execute(INSERT_PLANNED, [stored(PlannedCell.__table__, row) for row in rows])

    def add_node_records(self, attempt: AttemptRecord, snapshot: SnapshotRecord) -> int:
        """A node's attempt that succeeded and its snapshot (add_attempt, then add_snapshot),
        in one journal write and one transaction: two commits and syncs per node were one."""
        at = datetime.now(UTC)
        tried, fields = {"at": at, **attempt.columns()}, snapshot.columns()
        ref = self._new_ref()
        self._journal_many(("attempt", tried), ("snapshot", {"ref": ref, **fields}))
        with self._writing_rows() as connection:
            snapshot_id = insert_node(connection, tried, fields)
        self._snapshot_refs[snapshot_id] = ref
        return snapshot_id

    def _new_ref(self) -> int:
        with self._refs_lock:
            return next(self._refs)

    def add_attempt(self, record: AttemptRecord) -> None:
        at = datetime.now(UTC)
        fields = record.columns()
        self._journal("attempt", {"at": at, **{k: v for k, v in fields.items() if k != "run_id"}})
        self._add(Attempt, {"at": at, **fields})

    def attempts(self, run_id: int) -> list[Attempt]:
        with self._reading() as session:
            query = select(Attempt).where(Attempt.run_id == run_id).order_by(Attempt.id)
            return list(session.scalars(query))

    def add_source(self, sha256: str, path: str, content: bytes) -> None:
        self._journal("source", {"sha256": sha256, "path": path, "content": content})
        with self._writing() as session:
            if session.get(SourceFile, sha256) is None:
                session.add(SourceFile(sha256=sha256, path=path, content=content, first_seen=datetime.now(UTC)))
                session.commit()

    # reads: queries.Queries, certifying.CertifyingQueries, measurements.MeasurementQueries

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
        self.engine.dispose()
