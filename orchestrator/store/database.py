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

import hashlib
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import (
    Table,
    func,
    make_url,
    select,
)
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from orchestrator.errors import StoreError
from orchestrator.metrics import BASELINE
from orchestrator.outcomes import Outcome
from orchestrator.store import journal
from orchestrator.store.engine import check_url, farm_tables, first_line, migrate, open_engine, redact_url
from orchestrator.store.inserts import Inserts
from orchestrator.store.journal import Journal
from orchestrator.store.location import sqlite_file
from orchestrator.store.queries import (
    BISECT_TRIGGER,
    CHUNK,
    Queries,
    chunks,
)
from orchestrator.store.records import AttemptRecord, ResultRecord, SnapshotRecord
from orchestrator.store.tables import (
    Attempt,
    Base,
    MetricValue,
    NodeSnapshotRow,
    PlannedCell,
    ResultRow,
    Run,
    SassCount,
    SourceFile,
)


class JournaledRun(NamedTuple):
    """A run found by its journal's token, with its rows that a journal also holds."""

    run_id: int
    status: str
    exit_code: int | None  # None: finish_run never committed (the farm died; marked aborted later)
    results: int
    attempts: int
    snapshots: int
    planned: int


def _no_nul(params: dict[str, Any]) -> dict[str, Any]:
    # PostgreSQL's text cannot hold NUL (SQLite's can): show it as U+FFFD rather than lose the row
    return {
        key: value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value
        for key, value in params.items()
    }


# A result's rows are written by inserts.py (SQLAlchemy's SQL and value conversions, the
# driver's execution): a result is written many times a second on a big fleet, and the
# ORM's unit of work, then Core's execution, cost more CPU than the rows themselves
_RESULTS: Table = ResultRow.__table__
_METRICS: Table = MetricValue.__table__
_SASS: Table = SassCount.__table__
_ATTEMPTS: Table = Attempt.__table__
_INSERT_SNAPSHOT = NodeSnapshotRow.__table__.insert()
_INSERT_PLANNED = PlannedCell.__table__.insert()
_ATTEMPT_NULLABLE = {"kernel": None, "variant": None, "stage": None, "error": None}  # one key set: one executemany


def _insert_result(
    connection: Connection,
    fields: dict[str, Any],
    metrics: Sequence[dict[str, Any]],
    attempts: Sequence[dict[str, Any]],
    *,
    postgres: bool,
) -> int:
    """A result's row, then (its id known) its metric values (metrics.Measured.record),
    its instruction counts, each with the cell's key, and the attempts that led to
    it (each with its `at`), in the caller's transaction. Returns the result's id."""
    clean = _no_nul if postgres else dict
    inserts = _inserts(connection.dialect)
    result_id = inserts.one(connection, _RESULTS, clean(fields))
    key = {
        "result_id": result_id,
        "run_id": fields["run_id"],
        "kernel": fields["kernel"],
        "variant": fields["variant"],
        "node": fields["node"],
        "device": fields.get("device", ""),
    }
    inserts.many(connection, _METRICS, [clean({**key, **metric}) for metric in metrics])
    if counts := fields.get("instruction_counts"):
        identity = fields.get("identity")
        inserts.many(
            connection,
            _SASS,
            [
                clean({"result_id": result_id, "identity": identity, "instruction": name, "count": count})
                for name, count in counts.items()
            ],
        )
    inserts.many(connection, _ATTEMPTS, [clean({**_ATTEMPT_NULLABLE, **attempt}) for attempt in attempts])
    return result_id


_PREPARED: weakref.WeakKeyDictionary[Dialect, Inserts] = weakref.WeakKeyDictionary()  # an engine's, while it lives


def _inserts(dialect: Dialect) -> Inserts:
    if dialect not in _PREPARED:
        _PREPARED[dialect] = Inserts(dialect)
    return _PREPARED[dialect]


# a journal's fields the import trusts to be of these types (what Store wrote); any other is refused
_JOURNAL_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "run": {
        "trigger": (str,),
        "farm_version": (str,),
        "host": (str,),
        "config_file": (str,),
        "selection": (str,),
        "started_at": (datetime,),
        "token": (str, type(None)),
        "farm_commit": (str, type(None)),
        "cell_env": (str, type(None)),
    },
    "finish": {"status": (str,), "exit_code": (int, type(None)), "ended_at": (datetime,)},
    "result": {
        "kernel": (str,),
        "variant": (str,),
        "node": (str,),
        "outcome": (str,),
        "exit_code": (int, type(None)),
        "started_at": (datetime,),
    },
    "source": {"sha256": (str,), "path": (str,), "content": (bytes,)},
}


def _check_journal(path: Path, records: list[tuple[str, dict[str, Any]]]) -> None:
    """A journal is read back as the farm wrote it, or refused whole (nothing imported):
    the types of the fields that name and judge a run, one run and at most one finish,
    known outcomes, and each source's bytes hashing to its sha256."""
    counts = {"run": 0, "finish": 0}
    for number, (kind, fields) in enumerate(records, 1):
        counts[kind] = counts.get(kind, 0) + 1
        for key, types in _JOURNAL_TYPES.get(kind, {}).items():
            if key in fields and (not isinstance(fields[key], types) or isinstance(fields[key], bool)):
                found = f"{key} is {fields[key]!r}"
                raise StoreError(f"{path}: record {number} ({kind}): {found}, not what the farm writes")
        if kind == "result" and fields.get("outcome") not in {o.value for o in Outcome}:
            raise StoreError(f"{path}: record {number} (result): outcome {fields.get('outcome')!r} is no outcome")
        if kind == "finish" and fields.get("status") not in ("finished", "aborted"):
            raise StoreError(f"{path}: record {number} (finish): status {fields.get('status')!r}")
        if kind == "source" and hashlib.sha256(fields.get("content", b"")).hexdigest() != fields.get("sha256"):
            raise StoreError(f"{path}: record {number} (source): its bytes do not hash to its sha256")
    if counts["run"] != 1 or counts["finish"] > 1:
        raise StoreError(f"{path}: {counts['run']} run and {counts['finish']} finish records (one run, one finish)")


def _utc(moment: datetime) -> datetime:
    """SQLite hands times back without their zone (stored as UTC); a journal's carry it."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _unfinished(
    planned: Sequence[tuple[str, str, str, str]], done: set[tuple[str, str, str, str]]
) -> list[tuple[str, str, str, str]]:
    """The planned cells (kernel, variant, node, device) with no result among `done`.
    A node with several card models planned its cells again per card: a cell planned
    per card needs that card's result; one planned for the node, any of its results
    (or its per-card plans)."""
    per_card = {(k, v, n) for k, v, n, d in planned if d}
    covered = per_card | {(k, v, n) for k, v, n, _d in done}  # made once: per cell, 0.1 s at 3,200 cells
    return [(k, v, n, d) for k, v, n, d in planned if ((k, v, n, d) not in done if d else (k, v, n) not in covered)]


def _never_finished(planned: Sequence[PlannedCell], done: set[tuple[str, str, str, str]]) -> list[PlannedCell]:
    """_unfinished, of PlannedCell objects."""
    keys = [(p.kernel, p.variant, p.node, p.device or "") for p in planned]
    missing = set(_unfinished(keys, done))
    return [p for p, key in zip(planned, keys, strict=True) if key in missing]


def _not_run_row(run_id: int, cell: PlannedCell, now: datetime, reason: str) -> ResultRow:
    return ResultRow(
        run_id=run_id,
        kernel=cell.kernel,
        variant=cell.variant,
        node=cell.node,
        device=cell.device,
        contract="",
        expected="unknown",
        contract_expected="unknown",
        expected_reason="",
        outcome=Outcome.NOT_RUN.value,
        failed_stage=None,
        reason=reason,
        stage_seconds={},
        stage_details={},
        build_command="",
        build_log=b"",
        stdout=b"",
        stderr=b"",
        source_sha256="",
        sources={},
        dependencies={},
        output_cuts={},
        markers={},
        instruction_counts={},
        required_instructions={},
        elf_targets=[],
        ptx_targets=[],
        started_at=now,
        ended_at=now,
    )


class Store(Queries):
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
        if self.engine.dialect.name == "postgresql":
            fields = _no_nul(fields)
        with self._writing_rows() as connection:
            return connection.execute(table.__table__.insert(), fields).inserted_primary_key[0]

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
        postgres = self.engine.dialect.name == "postgresql"
        run_fields = {"started_at": started, "status": "running", **fields}
        with self._writing_rows() as connection:
            run_id = connection.execute(
                Run.__table__.insert(), _no_nul(run_fields) if postgres else run_fields
            ).inserted_primary_key[0]
            rows = [{"run_id": run_id, "kernel": k, "variant": v, "node": n, "device": d} for k, v, n, d in planned]
            if rows:
                connection.execute(_INSERT_PLANNED, [_no_nul(row) for row in rows] if postgres else rows)
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
                connection.execute(SourceFile.__table__.insert(), [_no_nul(row) for row in kept] if postgres else kept)
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
        if unjournaled is not None:
            raise unjournaled

    def add_snapshot(self, record: SnapshotRecord) -> int:
        ref = len(self._snapshot_refs) + 1
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
        postgres = self.engine.dialect.name == "postgresql"
        with self._writing_rows() as connection:
            return _insert_result(connection, fields, metrics, tries, postgres=postgres)

    def add_planned(self, run_id: int, cells: list[tuple[str, str, str, str]]) -> None:
        """(kernel, variant, node, device) of cells a run sets out to do; a node's
        cells are planned again per card model once its probe found several."""
        self._journal("planned", {"cells": [list(cell) for cell in cells]})
        if not cells:
            return
        rows = [{"run_id": run_id, "kernel": k, "variant": v, "node": n, "device": d} for k, v, n, d in cells]
        with self._writing_rows() as connection:  # one executemany: the ORM's objects cost 1.4 ms a cell (profiled)
            postgres = self.engine.dialect.name == "postgresql"
            connection.execute(_INSERT_PLANNED, [_no_nul(row) for row in rows] if postgres else rows)

    def recorded_binary(self, node: str, build_key: str) -> str | None:
        """The binary sha256 the latest result with this build key on this node
        recorded: what a cached build on the node must still hash to."""
        query = (
            select(ResultRow.binary_sha256)
            .where(ResultRow.node == node, ResultRow.build_key == build_key)
            .where(ResultRow.binary_sha256.is_not(None))
            .order_by(ResultRow.id.desc())
            .limit(1)
        )
        with self._reading() as session:
            return session.scalars(query).first()

    def recorded_binaries(self, node: str, build_keys: Sequence[str]) -> dict[str, str | None]:
        """recorded_binary for each of these build keys on this node (None where none is
        recorded), in one query: a node's cells ask it once, not a query (and, from a
        worker process, a round trip to the parent) per cell."""
        found: dict[str, str | None] = dict.fromkeys(build_keys)
        table = ResultRow.__table__
        keys = list(found)
        with self._reading() as session:
            for start in range(0, len(keys), 500):  # bound the IN list (PostgreSQL, SQLite)
                rows = session.execute(
                    select(table.c.build_key, table.c.binary_sha256)
                    .where(table.c.node == node, table.c.build_key.in_(keys[start : start + 500]))
                    .where(table.c.binary_sha256.is_not(None))
                    .order_by(table.c.id)
                )
                for key, sha in rows:  # the latest wins, as in recorded_binary
                    found[key] = sha
        return found

    def metric_baseline(
        self,
        kernel: str,
        variant: str,
        node: str,
        device: str,
        names: Sequence[str],
        cell_env: str,
        count: int = BASELINE,
    ) -> dict[str, list[float]]:
        """The cell's last `count` values of each metric on record (results that had
        one), oldest first: what a new value is judged against (metrics.py). Only
        values of runs whose cells ran with the same `cell_env` count (before 0012, with
        the JIT cache on, a run's seconds were measured differently); nor those of a
        bisection's old commits. Read from ix_metric_values_cell, newest first."""
        found: dict[str, list[float]] = {}
        comparable = select(Run.id).where(Run.cell_env == cell_env, Run.trigger != BISECT_TRIGGER)
        with self._reading() as session:
            for name in names:
                query = (
                    select(MetricValue.value)
                    .where(
                        MetricValue.kernel == kernel,
                        MetricValue.variant == variant,
                        MetricValue.node == node,
                        MetricValue.device == device,
                        MetricValue.name == name,
                        MetricValue.value.is_not(None),
                    )
                    .where(MetricValue.run_id.in_(comparable))
                    .order_by(MetricValue.result_id.desc())
                    .limit(count)
                )
                found[name] = list(reversed(session.scalars(query).all()))
        return found

    _METRIC = (
        MetricValue.result_id,
        MetricValue.run_id,
        MetricValue.kernel,
        MetricValue.variant,
        MetricValue.node,
        MetricValue.device,
        MetricValue.name,
        MetricValue.value,
        MetricValue.unit,
        MetricValue.better,
        MetricValue.tolerance,
        MetricValue.note,
        MetricValue.baseline,
        MetricValue.regressed,
    )
    # what a trend draws, in this order (the report unpacks them as tuples: 10^5 rows)
    TREND = (
        MetricValue.result_id,
        MetricValue.run_id,
        MetricValue.kernel,
        MetricValue.variant,
        MetricValue.node,
        MetricValue.device,
        MetricValue.name,
        MetricValue.value,
        MetricValue.unit,
        MetricValue.better,
        MetricValue.baseline,
        MetricValue.regressed,
    )

    def metric_values(self, *, run_id: int | None = None, result_ids: Sequence[int] = ()) -> list[Any]:
        """Every column of the metric values (light rows, in result and name order)
        of one run's results, or of these results."""
        rows: list[Any] = []
        with self._reading() as session:
            rows_of = session.connection().execute  # Core rows: no ORM pass over each
            if run_id is not None:
                rows += rows_of(select(*self._METRIC).where(MetricValue.run_id == run_id)).all()
            for chunk in chunks(sorted(set(result_ids))):
                rows += rows_of(select(*self._METRIC).where(MetricValue.result_id.in_(chunk))).all()
        return sorted(rows, key=lambda row: (row.result_id, row.name))

    def metric_trends(self, run_ids: Sequence[int]) -> list[Any]:
        """The values of these runs' results, as rows of Store.TREND (no value: left
        out), from ix_metric_values_run; in no particular order."""
        if not run_ids:
            return []
        query = select(*self.TREND).where(MetricValue.run_id.in_(sorted(set(run_ids))), MetricValue.value.is_not(None))
        with self._reading() as session:
            return session.connection().execute(query).all()

    def sass_counts(self, result_ids: Sequence[int]) -> dict[int, tuple[str | None, dict[str, int]]]:
        """result id -> (its inputs' identity, instruction -> count), for those inspected."""
        found: dict[int, tuple[str | None, dict[str, int]]] = {}
        with self._reading() as session:
            for chunk in chunks(sorted(set(result_ids))):
                query = select(SassCount.result_id, SassCount.identity, SassCount.instruction, SassCount.count).where(
                    SassCount.result_id.in_(chunk)
                )
                for result_id, identity, instruction, count in session.connection().execute(query).all():
                    found.setdefault(result_id, (identity, {}))[1][instruction] = count
        return found

    def add_attempt(self, record: AttemptRecord) -> None:
        at = datetime.now(UTC)
        fields = record.columns()
        self._journal("attempt", {"at": at, **{k: v for k, v in fields.items() if k != "run_id"}})
        self._add(Attempt, {"at": at, **fields})

    def attempts(self, run_id: int) -> list[Attempt]:
        with self._reading() as session:
            query = select(Attempt).where(Attempt.run_id == run_id).order_by(Attempt.id)
            return list(session.scalars(query))

    def abort_unfinished_runs(self) -> list[tuple[int, int]]:
        """Runs still marked running belong to a farm that died (the caller holds
        the run lock, so none is alive): mark them aborted, and record each cell
        they planned but never finished as not-run. Returns (run id, not-run count)."""
        aborted = []
        now = datetime.now(UTC)
        with self._writing() as session:
            for run in session.scalars(select(Run).where(Run.status == "running").order_by(Run.id)):
                done = {(r.kernel, r.variant, r.node, r.device) for r in run.results}
                planned = list(session.scalars(select(PlannedCell).where(PlannedCell.run_id == run.id)))
                missing = _never_finished(planned, done)
                for cell in missing:
                    session.add(
                        _not_run_row(
                            run.id,
                            cell,
                            now,
                            "the farm was stopped before this cell finished (found at the next start)",
                        )
                    )
                run.status = "aborted"
                run.ended_at = run.ended_at or now
                aborted.append((run.id, len(missing)))
            session.commit()
        return aborted

    def add_source(self, sha256: str, path: str, content: bytes) -> None:
        self._journal("source", {"sha256": sha256, "path": path, "content": content})
        with self._writing() as session:
            if session.get(SourceFile, sha256) is None:
                session.add(SourceFile(sha256=sha256, path=path, content=content, first_seen=datetime.now(UTC)))
                session.commit()

    # reads: queries.Queries

    def journaled_runs(self, tokens: Sequence[str]) -> dict[str, JournaledRun]:
        """token -> the run of that token and how many of each journaled row it
        holds (journal.prune compares them with its journal); unknown tokens left out."""
        found: dict[str, JournaledRun] = {}
        tables = {"results": ResultRow, "attempts": Attempt, "snapshots": NodeSnapshotRow, "planned": PlannedCell}
        with self._reading() as session:
            for start in range(0, len(tokens), CHUNK):
                chunk = sorted(set(tokens[start : start + CHUNK]))
                query = select(Run.id, Run.token, Run.status, Run.exit_code).where(Run.token.in_(chunk))
                runs = {rid: (token, status, code) for rid, token, status, code in session.execute(query)}
                counts: dict[str, dict[int, int]] = {name: {} for name in tables}
                if runs:
                    for name, table in tables.items():
                        grouped = select(table.run_id, func.count()).where(table.run_id.in_(list(runs)))
                        counts[name] = dict(session.execute(grouped.group_by(table.run_id)).all())
                for rid, (token, status, code) in runs.items():
                    found[token] = JournaledRun(rid, status, code, *(counts[name].get(rid, 0) for name in tables))
        return found

    def import_journal(self, path: Path) -> tuple[int, str, int]:
        """Rebuild a run from its journal (journal.py) as a new run of this database.
        Returns (run id, status, results). A run already here is refused, and so is
        one that started before the newest run here: every standing query takes the
        highest id as the newest, so an older run imported later would pass for it."""
        records = list(journal.read(path))
        if not records or records[0][0] != "run":
            raise StoreError(f"{path}: not a farm journal (its first record is not a run)")
        _check_journal(path, records)
        run_fields = dict(records[0][1])
        token = run_fields.get("token")
        with self._guard("importing"), self._write_lock, self.session() as session:
            if token and (found := session.scalars(select(Run.id).where(Run.token == token)).first()) is not None:
                raise StoreError(f"{path}: its run is already in {self.redacted_url} as run {found}")
            newest = session.scalars(select(Run).order_by(Run.started_at.desc(), Run.id.desc()).limit(1)).first()
            started = run_fields.get("started_at")
            if newest is not None and isinstance(started, datetime) and _utc(started) < _utc(newest.started_at):
                raise StoreError(
                    f"{path}: its run started {_utc(started).isoformat(timespec='seconds')}, before run "
                    f"{newest.id} ({_utc(newest.started_at).isoformat(timespec='seconds')}) already in "
                    f"{self.redacted_url}; import journals oldest first (farm import takes several and sorts them). "
                    "A run newer than it is already there (a later night's): its standing would go back in time; "
                    "import it into a database of its own (farm import JOURNAL --database sqlite:///recovered.db) "
                    "and read it there (farm report --database sqlite:///recovered.db --out DIR)"
                )
            end = next((fields for kind, fields in records if kind == "finish"), None)
            run = Run(
                status=end["status"] if end else "aborted",
                exit_code=end["exit_code"] if end else None,
                ended_at=end["ended_at"] if end else run_fields["started_at"],
                **run_fields,
            )
            session.add(run)
            session.flush()
            connection = session.connection()  # the rows a run writes many of, as Store writes them
            postgres = self.engine.dialect.name == "postgresql"
            clean = _no_nul if postgres else dict
            snapshots: dict[int, int] = {}
            results = 0
            done: set[tuple[str, str, str, str]] = set()
            planned: list[PlannedCell] = []
            for kind, fields in records[1:]:
                if kind == "snapshot":
                    ref = fields.pop("ref")
                    inserted = connection.execute(_INSERT_SNAPSHOT, clean({"run_id": run.id, **fields}))
                    snapshots[ref] = inserted.inserted_primary_key[0]
                elif kind == "result":
                    ref = fields.pop("snapshot_ref")
                    metrics = fields.pop("metrics", [])
                    row = {"run_id": run.id, "snapshot_id": snapshots.get(ref), **fields}
                    _insert_result(connection, row, metrics, (), postgres=postgres)
                    done.add((fields["kernel"], fields["variant"], fields["node"], fields.get("device", "")))
                    results += 1
                elif kind == "attempt":
                    connection.execute(_ATTEMPTS.insert(), clean({**_ATTEMPT_NULLABLE, "run_id": run.id, **fields}))
                elif kind == "planned":
                    cells = [
                        PlannedCell(run_id=run.id, kernel=k, variant=v, node=n, device=d)
                        for k, v, n, d in fields["cells"]
                    ]
                    session.add_all(cells)
                    planned += cells
                elif kind == "source" and session.get(SourceFile, fields["sha256"]) is None:
                    session.add(SourceFile(first_seen=run.started_at, **fields))
            # what the run planned but never finished: not-run, as abort_unfinished_runs records it
            for cell in _never_finished(planned, done):
                session.add(
                    _not_run_row(
                        run.id, cell, run.ended_at, "the run stopped before this cell finished (from its journal)"
                    )
                )
            session.commit()
            return run.id, run.status, results

    def unfinished_cells(self, run_id: int) -> list[tuple[str, str, str, str]]:
        """(kernel, variant, node, device) of the cells the run planned that have no
        result (yet): a run still running, one whose farm died before the next start
        marked it aborted (abort_unfinished_runs), or one that lost a cell. Asked at
        every run's end and every render: plain rows of the run's index entries."""
        with self._reading() as session:
            connection = session.connection()
            planned = select(PlannedCell.kernel, PlannedCell.variant, PlannedCell.node, PlannedCell.device)
            cells = [
                (k, v, n, d or "") for k, v, n, d in connection.execute(planned.where(PlannedCell.run_id == run_id))
            ]
            results = select(ResultRow.kernel, ResultRow.variant, ResultRow.node, ResultRow.device)
            done = {(k, v, n, d or "") for k, v, n, d in connection.execute(results.where(ResultRow.run_id == run_id))}
        return _unfinished(cells, done)

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
        self.engine.dispose()
