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
import functools
import hashlib
import os
import re
import sqlite3
import threading
import weakref
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import (
    Date,
    Table,
    and_,
    cast,
    create_engine,
    event,
    func,
    inspect,
    make_url,
    select,
    text,
    union,
)
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, aliased

from orchestrator.errors import StoreError
from orchestrator.metrics import BASELINE
from orchestrator.outcomes import Outcome
from orchestrator.store import journal
from orchestrator.store.inserts import Inserts
from orchestrator.store.journal import Journal
from orchestrator.store.location import sqlite_file
from orchestrator.store.records import AttemptRecord, ResultRecord, SnapshotRecord
from orchestrator.store.tables import (
    Attempt,
    Base,
    Meta,
    MetricValue,
    NodeSnapshotRow,
    PlannedCell,
    ResultRow,
    Run,
    SassCount,
    SourceFile,
)

MIGRATIONS = Path(__file__).parent / "migrations"
FIRST_SCHEMA = "0001"  # databases made before the farm used Alembic have this schema
CONNECT_TIMEOUT = 10  # seconds, for server databases (PostgreSQL)
MIGRATION_LOCK = 0x6661726D  # "farm": PostgreSQL advisory lock serialising concurrent migrations
CHUNK = 500  # ids per IN (...) list: well inside every driver's bound-parameter limit
# see Store._certifying; a perf-regression passed its numbers: slower, still correct
_CERTIFYING_OUTCOMES = (Outcome.PASS.value, Outcome.FIXED.value, Outcome.PERF_REGRESSION.value)
BISECT_TRIGGER = "bisect"  # the trigger of `farm bisect`'s runs
_NO_VERDICT = (Outcome.INFRA_ERROR.value, Outcome.NOT_RUN.value)  # the node's fault: no verdict on the kernel


class CertifyingGroup(NamedTuple):
    kernel: str
    identity: str
    cc: str
    passes: int
    first_id: int
    last_id: int


class JournaledRun(NamedTuple):
    """A run found by its journal's token, with its rows that a journal also holds."""

    run_id: int
    status: str
    exit_code: int | None  # None: finish_run never committed (the farm died; marked aborted later)
    results: int
    attempts: int
    snapshots: int
    planned: int


class CertifyingDay(NamedTuple):
    kernel: str
    identity: str
    cc: str
    day: str


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=30000")  # first: the pragmas below may wait for a lock
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


# secrets a database URL may hold: the password between user: and the last @
# (it may itself hold @ or /), and any query parameter named like a password
_QUERY_SECRET = re.compile(r"([?&][^=&#]*password[^=&#]*=)([^&#]*)", re.IGNORECASE)
_SCHEME = re.compile(r"^(.*?//)(.*)$", re.DOTALL)  # lenient: a URL the driver cannot parse holds secrets too


def _secrets(url: str) -> list[str]:
    found = [m.group(2) for m in _QUERY_SECRET.finditer(url) if m.group(2)]
    scheme = _SCHEME.match(_QUERY_SECRET.sub(r"\1", url))
    if scheme and "@" in scheme.group(2):
        credentials = scheme.group(2).rsplit("@", 1)[0]
        if ":" in credentials and credentials.split(":", 1)[1]:
            found.append(credentials.split(":", 1)[1])
    return found


def redact_url(url: str) -> str:
    """The URL with every password shown as ***: never echo a password."""
    text = _QUERY_SECRET.sub(r"\1***", url)
    scheme = _SCHEME.match(text)
    if scheme and "@" in scheme.group(2):
        credentials, host = scheme.group(2).rsplit("@", 1)
        if ":" in credentials:
            credentials = credentials.split(":", 1)[0] + ":***"
        text = f"{scheme.group(1)}{credentials}@{host}"
    return text


def _scrub(message: str, url: str) -> str:
    """An error message with the URL's passwords masked, wherever a driver echoed them."""
    message = message.replace(url, redact_url(url))
    for secret in sorted(_secrets(url), key=len, reverse=True):
        if len(secret) >= 4:
            message = message.replace(secret, "***")
    return message


def _first_line(err: BaseException, url: str) -> str:
    lines = str(err).strip().splitlines()
    return _scrub(f"{err.__class__.__name__}: {lines[0] if lines else ''}", url)


def _engine(url: str) -> Engine:
    """An engine with each backend's settings (see the module's docstring)."""
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        engine = create_engine(url)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    connect_args: dict[str, Any] = {}
    if backend == "postgresql":
        query = make_url(url).query
        if "connect_timeout" not in query:
            connect_args["connect_timeout"] = CONNECT_TIMEOUT
        if "options" not in query:
            connect_args["options"] = "-c timezone=UTC"
    return create_engine(url, connect_args=connect_args, pool_pre_ping=True)


def _farm_tables(path: Path) -> bool:
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
        current = context.get_current_revision()
        if current is not None and current == scripts.get_current_head():
            return  # this farm's schema already: what every run but the first finds
        known = {script.revision for script in scripts.walk_revisions()}
        present = set(inspect(connection).get_table_names())
        if current is None and "runs" in present:
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
        if current is not None and current not in known:
            raise StoreError(
                f"the results database {redact_url(url)} has schema revision {current}, written by a newer "
                f"farm; this farm knows revisions up to {scripts.get_current_head()}. "
                "Upgrade the farm."
            )
        if not create:
            _refuse_older(url, current, scripts)
        command.upgrade(config, "head")


def _refuse_older(url: str, current: str, scripts: ScriptDirectory) -> NoReturn:
    raise StoreError(
        f"the results database {redact_url(url)} has schema revision {current}, older than this farm's "
        f"{scripts.get_current_head()}; a command that only reads does not upgrade it: `farm verify` "
        "upgrades it (back it up first: the farm that wrote it cannot read it after), or use the farm "
        "that wrote it"
    )


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


def _never_finished(planned: Sequence[PlannedCell], done: set[tuple[str, str, str, str]]) -> list[PlannedCell]:
    """The planned cells with no result among `done` (kernel, variant, node, device).
    A node with several card models planned its cells again per card: a cell planned
    per card needs that card's result; one planned for the node, any of its results
    (or its per-card plans)."""
    finished = {(k, v, n) for k, v, n, _d in done}
    per_card = {(p.kernel, p.variant, p.node) for p in planned if p.device}
    return [
        p
        for p in planned
        if (p.device and (p.kernel, p.variant, p.node, p.device) not in done)
        or (not p.device and (p.kernel, p.variant, p.node) not in finished | per_card)
    ]


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


class Store:
    """Opens (and creates) the database; every write commits at once."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        """`create=False` for commands that only read: a missing SQLite file is
        an error, never an empty database made as a side effect."""
        self.url = url
        self.redacted_url = redact_url(url)  # for messages
        try:  # once, here: a URL SQLAlchemy cannot read (or a port that is no number) is the user's
            make_url(url).port  # noqa: B018 - reading it is the check
        except (SQLAlchemyError, ValueError) as err:
            raise StoreError(
                f"the results database URL {self.redacted_url!r} cannot be read ({_first_line(err, url)}): "
                "expected e.g. sqlite:///results.db or postgresql+psycopg://user:password@host/db"
            ) from None
        self._write_lock = threading.Lock()
        self._pinned = threading.local()  # this thread's snapshot session, inside reading()
        self.journal: Journal | None = None  # a run's safety copy of every write (journal.py)
        self._snapshot_refs: dict[int, int] = {}
        if not create and make_url(url).get_backend_name() == "sqlite":
            path = make_url(url).database
            if path and path != ":memory:" and not Path(path).is_file():
                raise StoreError(f"no results database at {path}: run `farm verify` first")
            if path and path != ":memory:" and not _farm_tables(Path(path)):
                # read-only, before the engine's first connection sets WAL mode in the file
                raise StoreError(
                    f"{path} holds no farm results (none of its tables is the farm's); nothing was written "
                    "to it: point --database or farm.yaml's `database` at the farm's own, or run `farm verify`"
                )
        try:
            self.engine = _engine(url)
        except ImportError as err:
            raise StoreError(
                f"cannot open the results database {self.redacted_url}: its driver is not installed "
                f"({_first_line(err, url)}); PostgreSQL's is psycopg: pip install 'psycopg[binary]'"
            ) from err
        except (SQLAlchemyError, ValueError) as err:
            raise StoreError(f"cannot open the results database {self.redacted_url}: {_first_line(err, url)}") from err
        try:
            migrate(self.engine, url, create)
        except (SQLAlchemyError, OSError) as err:
            self.engine.dispose()
            said = _first_line(err, url)
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
                f"the results database {self.redacted_url} failed {doing}: {_first_line(err, self.url)}"
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
    def begin_run(self, **fields: Any) -> int:
        started = datetime.now(UTC)
        self._journal("run", {"started_at": started, **fields})
        return self._add(Run, {"started_at": started, "status": "running", **fields})

    def finish_run(self, run_id: int, status: str, exit_code: int) -> None:
        self._journal("finish", {"status": status, "exit_code": exit_code, "ended_at": datetime.now(UTC)})
        with self._writing() as session:
            run = session.get(Run, run_id)
            assert run is not None
            run.status = status
            run.exit_code = exit_code
            run.ended_at = datetime.now(UTC)
            session.commit()

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
            for chunk in _chunks(sorted(set(result_ids))):
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
            for chunk in _chunks(sorted(set(result_ids))):
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

    # reads -------------------------------------------------------------------
    def latest_run(self) -> Run | None:
        with self._reading() as session:
            return session.scalars(select(Run).order_by(Run.id.desc()).limit(1)).first()

    def run(self, run_id: int) -> Run | None:
        if not 1 <= run_id < 2**63:  # no id a database holds (SQLite's INTEGER would overflow)
            return None
        with self._reading() as session:
            return session.get(Run, run_id)

    def runs(self, limit: int = 50, upto: int | None = None) -> list[Run]:
        """The newest runs first, optionally none newer than run `upto`."""
        query = select(Run)
        if upto is not None:
            query = query.where(Run.id <= upto)
        with self._reading() as session:
            return list(session.scalars(query.order_by(Run.id.desc()).limit(limit)))

    def snapshots(self, run_id: int) -> list[NodeSnapshotRow]:
        with self._reading() as session:
            query = select(NodeSnapshotRow).where(NodeSnapshotRow.run_id == run_id)
            return list(session.scalars(query.order_by(NodeSnapshotRow.id)))

    def results(self, run_id: int) -> list[ResultRow]:
        with self._reading() as session:
            query = select(ResultRow).where(ResultRow.run_id == run_id)
            return list(session.scalars(query.order_by(ResultRow.id)))

    def source(self, sha256: str) -> SourceFile | None:
        with self._reading() as session:
            return session.get(SourceFile, sha256)

    _KEY = (ResultRow.kernel, ResultRow.variant, ResultRow.node, ResultRow.device)
    _STANDING = (
        ResultRow.id,
        ResultRow.run_id,
        *_KEY,
        ResultRow.contract,
        ResultRow.contract_ccs,
        ResultRow.expected,
        ResultRow.outcome,
        ResultRow.failed_stage,
        ResultRow.reason,
        ResultRow.last_stderr_line,
        ResultRow.cc,
        ResultRow.real_gpu,
        ResultRow.code_path,
        ResultRow.identity,  # the ledger flags a certificate whose bytes a sanitizer now faults
        ResultRow.started_at,
        ResultRow.ended_at,
    )

    def standing(self, upto: int) -> tuple[dict[tuple, Any], dict[tuple, Any]]:
        """The fleet's standing as of run `upto`: per (kernel, variant, node, device),
        the latest result with a verdict and the latest result of any kind (light rows).

        Both are taken per cell from the ix_results_cell index alone (the table's
        wide rows are read only for the at most two results per cell returned)."""
        # a bisection's runs test old commits: they are not the fleet's standing (bisect.py)
        current = ResultRow.run_id.not_in(select(Run.id).where(Run.trigger == BISECT_TRIGGER))
        verdicts = (
            select(func.max(ResultRow.id))
            .where(ResultRow.run_id <= upto, current)
            .where(ResultRow.outcome.not_in(_NO_VERDICT))
            .group_by(*self._KEY)
        )
        anything = select(func.max(ResultRow.id)).where(ResultRow.run_id <= upto, current).group_by(*self._KEY)
        # a subquery, not a list of ids: a big farm's cells would pass the drivers' bound-parameter limits
        query = select(*self._STANDING).where(ResultRow.id.in_(union(verdicts, anything))).order_by(ResultRow.id)
        with self._reading() as session:
            rows = session.connection().execute(query).all()
        latest_verdict: dict[tuple, Any] = {}
        latest_any: dict[tuple, Any] = {}
        for row in rows:  # in id order: the last one written per cell wins
            key = (row.kernel, row.variant, row.node, row.device)
            latest_any[key] = row
            if row.outcome not in _NO_VERDICT:
                latest_verdict[key] = row
        return latest_verdict, latest_any

    def previous_verdicts(self, run_id: int, per_cell: int = 10) -> dict[tuple, list[tuple[int, str]]]:
        """For each cell of run `run_id`, the outcomes of its last `per_cell` results
        from earlier runs, oldest first: [(run id, outcome)]."""
        cells = {row.id: (row.kernel, row.variant, row.node, row.device) for row in self.run_matrix([run_id])}
        return {
            cells[this_id]: [(rid, outcome) for rid, outcome, _id in prior]
            for this_id, prior in self.previous_results(run_id=run_id, per_cell=per_cell).items()
        }

    def previous_results(
        self, *, run_id: int | None = None, result_ids: list[int] | None = None, per_cell: int = 10
    ) -> dict[int, list[tuple[int, str, int]]]:
        """For each result of run `run_id` (or each of `result_ids`), its cell's last
        `per_cell` results from runs before that result's run, oldest first:
        result id -> [(run id, outcome, result id)]; a result with none is left out.

        Bounded by `per_cell` per result, whatever the history's length: read from
        the ix_results_cell index alone, from the result's run back. "Last" is in
        run order, then id order; ids grow with runs, so that is the order the
        results were written in."""
        if (run_id is None) == (result_ids is None):
            raise ValueError("previous_results: give run_id or result_ids")
        this = aliased(ResultRow, name="this")
        earlier = aliased(ResultRow, name="earlier")
        same_cell = [getattr(earlier, c.key) == getattr(this, c.key) for c in self._KEY]
        # the run of the cell's per_cell-th result back: every one of the last per_cell lies in it or
        # after, so the join below reads index entries only, and at most per_cell (more only when a
        # cell has several results in one run, trimmed below)
        oldest = (
            select(earlier.run_id)
            .where(*same_cell, earlier.run_id < this.run_id)
            .order_by(earlier.run_id.desc())
            .offset(per_cell - 1)
            .limit(1)
            .correlate(this)
            .scalar_subquery()
        )
        earlier_rows = (
            select(this.id.label("this_id"), earlier.run_id, earlier.outcome, earlier.id)
            .join(
                earlier,
                and_(*same_cell, earlier.run_id < this.run_id, earlier.run_id >= func.coalesce(oldest, -1)),
            )
            .order_by(this.id, earlier.run_id, earlier.id)
        )
        with self._reading() as session:
            if run_id is not None:
                rows = list(session.execute(earlier_rows.where(this.run_id == run_id)))
            else:
                rows = []
                for chunk in _chunks(sorted(set(result_ids or []))):
                    rows += session.execute(earlier_rows.where(this.id.in_(chunk)))
        found: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
        for this_id, rid, outcome, res in rows:
            found[this_id].append((rid, outcome, res))
        return {this_id: prior[-per_cell:] for this_id, prior in found.items()}

    def run_starts(self, run_ids: list[int]) -> dict[int, datetime]:
        """run id -> when it started."""
        found: dict[int, datetime] = {}
        with self._reading() as session:
            for chunk in _chunks(sorted(set(run_ids))):
                found.update(
                    (rid, started)
                    for rid, started in session.execute(select(Run.id, Run.started_at).where(Run.id.in_(chunk)))
                )
        return found

    def run_outcome_counts(self, run_ids: list[int]) -> dict[int, dict[str, int]]:
        """run -> outcome -> number of results, counted in the database (ix_results_run_cell)."""
        counts: dict[int, dict[str, int]] = {rid: {} for rid in run_ids}
        if not run_ids:
            return counts
        query = (
            select(ResultRow.run_id, ResultRow.outcome, func.count())
            .where(ResultRow.run_id.in_(run_ids))
            .group_by(ResultRow.run_id, ResultRow.outcome)
        )
        with self._reading() as session:
            for rid, outcome, n in session.execute(query):
                counts[rid][outcome] = n
        return counts

    def run_matrix(self, run_ids: list[int]) -> list[Any]:
        """Light rows (id, run_id, kernel, variant, node, device, outcome) of these
        runs' results, read from the ix_results_run_cell index, in id order."""
        if not run_ids:
            return []
        # no ORDER BY: SQLite would then walk ix_results_run_id (already in id order)
        # and fetch each wide row (logs are inline) instead of reading the covering
        # ix_results_run_cell alone; sorting a run's few thousand ids here is cheaper
        query = select(ResultRow.id, ResultRow.run_id, *self._KEY, ResultRow.outcome).where(
            ResultRow.run_id.in_(run_ids)
        )
        with self._reading() as session:
            rows = session.connection().execute(query).all()
        rows.sort(key=lambda row: row[0])
        return rows

    def unconfirmed_results(self, run_ids: list[int]) -> set[int]:
        """Ids of these runs' as-expected results on a card the NVIDIA driver did not
        confirm (report.model.unconfirmed): no page paints them green."""
        if not run_ids:
            return set()
        query = select(ResultRow.id).where(
            ResultRow.run_id.in_(run_ids),
            ResultRow.device != "",
            ResultRow.real_gpu.is_(False),
            ResultRow.outcome.in_(["pass", "expected-refusal", "fixed"]),
        )
        with self._reading() as session:
            return {row[0] for row in session.connection().execute(query)}

    def result_rows(self, result_ids: list[int], json_as_text: bool = False) -> list[Any]:
        """Whole results (logs included) as plain rows, not ORM objects: what a cell
        page shows, read in chunks of ids, in id order. `json_as_text`: the JSON
        columns as their stored text, for a caller that decodes the few distinct
        values once (a run's thousands of rows repeat the same few dozen)."""
        from sqlalchemy import JSON, Text

        columns: list[Any] = [
            cast(column, Text).label(column.key) if json_as_text and isinstance(column.type, JSON) else column
            for column in ResultRow.__table__.columns
        ]
        rows: list[Any] = []
        with self._reading() as session:
            for chunk in _chunks(sorted(set(result_ids))):
                query = select(*columns).where(ResultRow.id.in_(chunk)).order_by(ResultRow.id)
                rows += session.connection().execute(query).all()  # Core rows: no ORM pass over each
        return rows

    def snapshot_rows(self, snapshot_ids: list[int]) -> dict[int, Any]:
        """Node snapshots as plain rows, by id."""
        found: dict[int, Any] = {}
        with self._reading() as session:
            for chunk in _chunks(sorted(set(snapshot_ids))):
                query = select(*NodeSnapshotRow.__table__.columns).where(NodeSnapshotRow.id.in_(chunk))
                found.update((row.id, row) for row in session.execute(query))
        return found

    def latest_snapshots(self, upto: int) -> list[NodeSnapshotRow]:
        """Each node's latest snapshot up to run `upto` that probed it (else its latest)."""
        probed = (
            select(func.max(NodeSnapshotRow.id))
            .where(NodeSnapshotRow.run_id <= upto, NodeSnapshotRow.probe_error.is_(None))
            .group_by(NodeSnapshotRow.node)
        )
        anything = (
            select(func.max(NodeSnapshotRow.id)).where(NodeSnapshotRow.run_id <= upto).group_by(NodeSnapshotRow.node)
        )
        with self._reading() as session:
            ids = set(session.scalars(probed))
            rows = {s.node: s for s in session.scalars(select(NodeSnapshotRow).where(NodeSnapshotRow.id.in_(ids)))}
            for snap in session.scalars(select(NodeSnapshotRow).where(NodeSnapshotRow.id.in_(anything))):
                rows.setdefault(snap.node, snap)
        return [rows[node] for node in sorted(rows)]

    def latest_identified(self, upto: int, kernels: list[str] | None = None) -> list[ResultRow]:
        """Each kernel's latest result (up to run `upto`) whose inputs are all identified.
        Given the kernels, each is looked up alone, newest first (ix_results_kernel),
        rather than by grouping every result on record."""
        if kernels is None:
            latest = (
                select(func.max(ResultRow.id))
                .where(ResultRow.run_id <= upto, ResultRow.identity.is_not(None))
                .group_by(ResultRow.kernel)
            )
            with self._reading() as session:
                return list(session.scalars(select(ResultRow).where(ResultRow.id.in_(latest)).order_by(ResultRow.id)))
        found: list[ResultRow] = []
        with self._reading() as session:
            for kernel in sorted(set(kernels)):
                query = (
                    select(ResultRow)
                    .where(ResultRow.kernel == kernel, ResultRow.run_id <= upto, ResultRow.identity.is_not(None))
                    .order_by(ResultRow.id.desc())
                    .limit(1)
                )
                found += session.scalars(query)
        return sorted(found, key=lambda row: row.id)

    def snapshots_of(self, run_ids: list[int]) -> list[NodeSnapshotRow]:
        if not run_ids:
            return []
        query = select(NodeSnapshotRow).where(NodeSnapshotRow.run_id.in_(run_ids))
        with self._reading() as session:
            return list(session.scalars(query.order_by(NodeSnapshotRow.id)))

    def _certifying(self, session: Session, outcomes: tuple[str, ...] = _CERTIFYING_OUTCOMES) -> list[Any]:
        """What certifies: a pass, where the contract required one, on a GPU the
        driver confirmed, of a result whose every input is identified, in a run that
        finished (one that did not never looks green: 0013). The rule lives here and
        nowhere else (`outcomes`: some of its outcomes only)."""
        unfinished = list(session.scalars(select(Run.id).where(Run.status != "finished")))
        return [
            ResultRow.outcome.in_([o for o in outcomes if o in _CERTIFYING_OUTCOMES]),
            ResultRow.contract_expected == Outcome.PASS.value,
            ResultRow.real_gpu.is_(True),
            ResultRow.cc.is_not(None),
            ResultRow.identity.is_not(None),
            *([ResultRow.run_id.not_in(unfinished)] if unfinished else []),
        ]

    def certifying_passes(self) -> list[Any]:
        """Every certifying pass (see _certifying): light rows (id, kernel,
        identity, cc, started_at), oldest first."""
        with self._reading() as session:
            query = (
                select(ResultRow.id, ResultRow.kernel, ResultRow.identity, ResultRow.cc, ResultRow.started_at)
                .where(*self._certifying(session))
                .order_by(ResultRow.id)
            )
            return list(session.execute(query))

    def certifying_groups(self, dated: list[tuple[str, str]] | None = None) -> tuple[list[Any], list[Any]]:
        """The certifying passes (see _certifying) per (kernel, identity, cc), counted
        in the database from the ix_results_certifying index alone: rows (kernel,
        identity, cc, passes, first_id, last_id); and for the (kernel, identity)
        pairs in `dated`, rows (kernel, identity, cc, day) of the UTC days their
        passes ran on ("YYYY-MM-DD")."""
        group = (ResultRow.kernel, ResultRow.identity, ResultRow.cc)
        groups: dict[tuple[str, str, str], list[int]] = {}
        dates: list[CertifyingDay] = []
        with self._reading() as session:
            # one outcome at a time: each is one range of the index, in (kernel, identity, cc) order,
            # so the database counts it in one pass without sorting
            for outcome in _CERTIFYING_OUTCOMES:
                query = (
                    select(*group, func.count(), func.min(ResultRow.id), func.max(ResultRow.id))
                    .where(*self._certifying(session, (outcome,)))
                    .group_by(*group)
                )
                for kernel, identity, cc, n, first_id, last_id in session.execute(query):
                    found = groups.setdefault((kernel, identity, cc), [0, first_id, last_id])
                    found[0] += n
                    found[1] = min(found[1], first_id)
                    found[2] = max(found[2], last_id)
            if self.engine.dialect.name == "postgresql":  # a timestamptz's day in UTC, whatever the session's zone
                day: Any = cast(func.timezone("UTC", ResultRow.started_at), Date)
            else:  # SQLite holds UTC times as text without a zone
                day = func.date(ResultRow.started_at)
            for kernel, identity in sorted(set(dated or [])):
                query = (
                    select(ResultRow.cc, day)
                    .where(*self._certifying(session), ResultRow.kernel == kernel, ResultRow.identity == identity)
                    .distinct()
                )
                for cc, on in session.execute(query):
                    dates.append(CertifyingDay(kernel, identity, cc, on if isinstance(on, str) else on.isoformat()))
        return [CertifyingGroup(*key, *found) for key, found in sorted(groups.items())], dates

    def results_with_snapshots(self, result_ids: list[int]) -> list[Any]:
        """Full rows of these results, each with its node snapshot."""
        if not result_ids:
            return []
        query = (
            select(ResultRow, NodeSnapshotRow)
            .join(NodeSnapshotRow, ResultRow.snapshot_id == NodeSnapshotRow.id)
            .where(ResultRow.id.in_(result_ids))
            .order_by(ResultRow.id)
        )
        with self._reading() as session:
            return list(session.execute(query))

    def result(self, result_id: int) -> ResultRow | None:
        with self._reading() as session:
            return session.get(ResultRow, result_id)

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
        result (yet): a run still running, or one whose farm died before the next
        start marked it aborted (abort_unfinished_runs)."""
        with self._reading() as session:
            planned = list(session.scalars(select(PlannedCell).where(PlannedCell.run_id == run_id)))
            rows = session.execute(
                select(ResultRow.kernel, ResultRow.variant, ResultRow.node, ResultRow.device).where(
                    ResultRow.run_id == run_id
                )
            )
            done = {(k, v, n, d or "") for k, v, n, d in rows}
        return [(p.kernel, p.variant, p.node, p.device or "") for p in _never_finished(planned, done)]

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
        self.engine.dispose()
