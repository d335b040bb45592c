"""Inserts on the hot path (a cell's result and its rows), and the reads in their transactions
(a run's status, a node's newest snapshot), run on the DBAPI cursor.

A big fleet stores a result many times a second, and SQLAlchemy's execution of a
Core insert (its context, parameter processing and result objects) cost about
four times the SQLite work itself: 1.3 ms of CPU per result of the farm's 2.4.
Here SQLAlchemy still writes the SQL (compiled once per table, key set and
dialect) and still converts each value (each column type's own bind processor,
as Core would: JSON, datetimes, blobs); only the execution is the driver's own,
inside the caller's transaction (the same pooled connection). A key set this
cannot serve as Core would (a missing column the database or a callable
fills) is refused at compile time, so the caller falls back to Core.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Table, bindparam, func, select, text
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

from orchestrator.store.tables import NodeSnapshotRow

Processor = Callable[[Any], Any] | None


class _Prepared:
    """One insert: its SQL and, in the driver's parameter order, each value's key and processor."""

    __slots__ = ("keys", "named", "processed", "returning", "sql", "values")

    def __init__(self, sql: str, order: list[tuple[str, Processor]], named: bool, returning: bool) -> None:
        self.sql = sql
        self.keys = [key for key, _ in order]
        self.values = operator.itemgetter(*self.keys) if len(order) > 1 else lambda row: (row[self.keys[0]],)
        # most columns need no conversion: only these are touched (by position)
        self.processed = [(i, process) for i, (_, process) in enumerate(order) if process is not None]
        self.named = named  # pyformat/named drivers take a dict, qmark/format a tuple
        self.returning = returning  # the id comes back as a row (PostgreSQL), not as lastrowid

    def parameters(self, row: dict[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        values = list(self.values(row))
        for i, process in self.processed:
            values[i] = process(values[i])
        return dict(zip(self.keys, values, strict=True)) if self.named else tuple(values)


class Inserts:
    """The prepared inserts of one dialect; `None` where Core must do it."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._prepared: dict[tuple[str, tuple[str, ...], bool], _Prepared | None] = {}
        # the run's status, read in a write's own transaction (Store._still_open): FOR SHARE waits for a
        # closing start's row lock (recovery.py) and holds the row against its UPDATE until this commits
        status = text("SELECT status FROM runs WHERE id = :id" + (" FOR SHARE" if dialect.name == "postgresql" else ""))
        self._status = _compiled(status, dialect)
        # a node's newest snapshot of a run, read in its records' transaction (recording._NewerSnapshot):
        # built and executed by Core per node, it was a fifth of a node's records write (issue 11)
        snapshots = NodeSnapshotRow.__table__
        newest = select(func.max(snapshots.c.id)).where(
            snapshots.c.run_id == bindparam("run_id"), snapshots.c.node == bindparam("node")
        )
        self._newest_snapshot = _compiled(newest, dialect)

    def _prepare(self, table: Table, keys: tuple[str, ...], want_id: bool) -> _Prepared | None:
        cache = (table.name, keys, want_id)
        if cache in self._prepared:
            return self._prepared[cache]
        prepared = None
        dialect = self._dialect
        columns = table.columns
        # a column left out gets NULL here; Core would give it its default (or the database its own)
        missing = [c for c in columns if c.key not in keys and not c.primary_key]
        if set(keys) <= set(columns.keys()) and not any(
            c.default is not None or c.server_default is not None for c in missing
        ):
            statement = table.insert()
            returning = want_id and dialect.name != "sqlite"
            if returning:
                statement = statement.returning(*table.primary_key.columns)
            compiled = statement.compile(dialect=dialect, column_keys=list(keys))
            names = list(compiled.positiontup or []) if compiled.positional else list(compiled.binds)
            processors = {c.key: c.type.dialect_impl(dialect).bind_processor(dialect) for c in columns if c.key in keys}
            # a bind named for its column (what an insert's compiler does); anything else: Core
            if set(names) == set(keys) and len(names) == len(keys):
                order = [(name, processors[name]) for name in names]
                prepared = _Prepared(compiled.string, order, not compiled.positional, returning)
        self._prepared[cache] = prepared
        return prepared

    def one(self, connection: Connection, table: Table, row: dict[str, Any]) -> int:
        """Inserts `row`; returns its primary key."""
        prepared = self._prepare(table, tuple(row), True)
        if prepared is None:
            return connection.execute(table.insert(), row).inserted_primary_key[0]
        parameters = prepared.parameters(row)
        cursor = connection.connection.cursor()
        try:
            cursor.execute(prepared.sql, parameters)
            return cursor.fetchone()[0] if prepared.returning else cursor.lastrowid
        except self._dialect.loaded_dbapi.Error as err:
            raise self._failed(connection, cursor, err, prepared.sql, parameters) from err
        finally:
            cursor.close()

    def many(self, connection: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
        """Inserts `rows`, which share one key set (else Core does)."""
        if not rows:
            return
        keys = tuple(rows[0])
        prepared = self._prepare(table, keys, False)
        if prepared is None or any(tuple(row) != keys for row in rows):
            connection.execute(table.insert(), list(rows))
            return
        parameters = [prepared.parameters(row) for row in rows]
        cursor = connection.connection.cursor()
        try:
            cursor.executemany(prepared.sql, parameters)
        except self._dialect.loaded_dbapi.Error as err:
            raise self._failed(connection, cursor, err, prepared.sql, parameters) from err
        finally:
            cursor.close()

    def run_status(self, connection: Connection, run_id: int) -> str | None:
        """Run `run_id`'s status in the caller's transaction (None: no such run)."""
        return self._scalar(connection, self._status, {"id": run_id})

    def newest_snapshot(self, connection: Connection, run_id: int, node: str) -> int | None:
        """The id of node `node`'s newest snapshot of run `run_id`, in the caller's transaction
        (None: none yet). `node` as the insert stored it (result_rows.stored)."""
        return self._scalar(connection, self._newest_snapshot, {"run_id": run_id, "node": node})

    def _scalar(self, connection: Connection, prepared: tuple[str, tuple[str, ...] | None], values: dict) -> Any:
        """The first column of the first row `prepared` reads (None: no row), on the driver's cursor."""
        sql, order = prepared
        parameters: Any = values if order is None else tuple(values[name] for name in order)
        cursor = connection.connection.cursor()
        try:
            cursor.execute(sql, parameters)
            row = cursor.fetchone()
            return row[0] if row is not None else None
        except self._dialect.loaded_dbapi.Error as err:
            raise self._failed(connection, cursor, err, sql, parameters) from err
        finally:
            cursor.close()

    def _failed(self, connection: Connection, cursor: Any, err: Exception, sql: str, parameters: Any) -> DBAPIError:
        """The driver's error as Core raises it (a DBAPIError, which the store's callers
        read), the connection dropped from the pool where the server went away."""
        gone = self._dialect.is_disconnect(err, connection.connection.dbapi_connection, cursor)
        if gone:
            connection.invalidate(err)
        return DBAPIError.instance(
            sql, parameters, err, self._dialect.loaded_dbapi.Error, connection_invalidated=gone, dialect=self._dialect
        )


def _compiled(statement: Any, dialect: Dialect) -> tuple[str, tuple[str, ...] | None]:
    """`statement`'s SQL for `dialect`, and the order of its parameters where the driver takes them
    by position (None: by name); values with no type conversion (ids, names) only."""
    compiled = statement.compile(dialect=dialect)
    return compiled.string, (tuple(compiled.positiontup or ()) if compiled.positional else None)
