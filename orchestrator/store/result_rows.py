"""A cell's result and the rows beside it (metric values, instruction counts, attempts), written
in the caller's transaction on the driver's cursor (inserts.py)."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from typing import Any

from sqlalchemy import BigInteger, Integer, String, Table
from sqlalchemy.engine import Connection, Dialect

from orchestrator.store.inserts import Inserts
from orchestrator.store.tables import Attempt, MetricValue, NodeSnapshotRow, PlannedCell, ResultRow, SassCount


def no_nul(params: dict[str, Any]) -> dict[str, Any]:
    # PostgreSQL's text cannot hold NUL (SQLite's can): U+FFFD rather than lose the row, on both
    # backends (SQLite showed a kernel's last words with "\x00", PostgreSQL with U+FFFD: a red-team finding)
    return {
        key: value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value
        for key, value in params.items()
    }


@functools.cache
def _limits(table: Table) -> tuple[tuple[str, int], ...]:
    """(column, length) of the table's String(n) columns (Text has none)."""
    return tuple((c.key, c.type.length) for c in table.columns if isinstance(c.type, String) and c.type.length)


@functools.cache
def _integers(table: Table) -> tuple[tuple[str, bool, int], ...]:
    """(column, nullable, bits) of the table's Integer columns of measured values: never an id (the
    server numbers them; one past its column is another run's or none, never one to make fit). A
    BigInteger column (tables.Wide) holds 64 bits on both backends, an Integer 32 on PostgreSQL."""
    ids = [c for c in table.columns if c.primary_key or c.foreign_keys or c.key.endswith("_id")]
    return tuple(
        (c.key, bool(c.nullable), 64 if isinstance(c.type, BigInteger) else 32)
        for c in table.columns
        if isinstance(c.type, Integer) and c not in ids
    )


TAIL = 7  # the end a cut value keeps: a farm commit's "+dirty", a name's last part


def fit(table: Table, params: dict[str, Any]) -> dict[str, Any]:
    """`params` with each string longer than its String(n) column cut to n, its middle
    given up ("…"), on every backend: PostgreSQL refused a longer one and the run died
    storing nothing (its previous night's green went on as the latest), while SQLite
    kept it whole; both keep the same now (a red-team finding). So too a number past an
    Integer column's 32 bits (a node's nvidia-smi saying GPU 3000000000: PostgreSQL's
    "integer out of range" stopped the run, exit 5, red-team 233): none where the column
    may be empty, else the nearest it holds. Sizes and counts that pass 32 bits are in BIGINT
    columns since 0018 and kept whole: cut to 2147483647, a 5 GiB upload read as 2 GiB (red-team 242)."""
    cut = {
        key: value[: n - TAIL - 1] + "\u2026" + value[-TAIL:]
        for key, n in _limits(table)
        if isinstance(value := params.get(key), str) and len(value) > n
    }
    for key, nullable, bits in _integers(table):
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        if type(value := params.get(key)) is int and not low <= value <= high:
            cut[key] = None if nullable else min(max(value, low), high)
    return {**params, **cut} if cut else params


def stored(table: Table, params: dict[str, Any]) -> dict[str, Any]:
    """`params` as `table` keeps them, alike on every backend (fit, no_nul)."""
    return no_nul(fit(table, params))


# A result's rows are written by inserts.py (SQLAlchemy's SQL and value conversions, the
# driver's execution): a result is written many times a second on a big fleet, and the
# ORM's unit of work, then Core's execution, cost more CPU than the rows themselves
RESULTS: Table = ResultRow.__table__
METRICS: Table = MetricValue.__table__
SASS: Table = SassCount.__table__
ATTEMPTS: Table = Attempt.__table__
SNAPSHOTS: Table = NodeSnapshotRow.__table__
INSERT_SNAPSHOT = SNAPSHOTS.insert()
INSERT_PLANNED = PlannedCell.__table__.insert()
ATTEMPT_NULLABLE = {"kernel": None, "variant": None, "stage": None, "error": None}  # one key set: one executemany


def insert_result(
    connection: Connection,
    fields: dict[str, Any],
    metrics: Sequence[dict[str, Any]],
    attempts: Sequence[dict[str, Any]],
) -> int:
    """A result's row, then (its id known) its metric values (metrics.Measured.record),
    its instruction counts, each with the cell's key, and the attempts that led to
    it (each with its `at`), in the caller's transaction. Returns the result's id."""
    inserts = _inserts(connection.dialect)
    result_id = inserts.one(connection, RESULTS, stored(RESULTS, fields))
    key = {
        "result_id": result_id,
        "run_id": fields["run_id"],
        "kernel": fields["kernel"],
        "variant": fields["variant"],
        "node": fields["node"],
        "device": fields.get("device", ""),
    }
    inserts.many(connection, METRICS, [stored(METRICS, {**key, **metric}) for metric in metrics])
    if counts := fields.get("instruction_counts"):
        identity = fields.get("identity")
        inserts.many(
            connection,
            SASS,
            [
                stored(SASS, {"result_id": result_id, "identity": identity, "instruction": name, "count": count})
                for name, count in counts.items()
            ],
        )
    inserts.many(connection, ATTEMPTS, [stored(ATTEMPTS, {**ATTEMPT_NULLABLE, **a}) for a in attempts])
    return result_id


def insert_node(connection: Connection, attempt: dict[str, Any], snapshot: dict[str, Any]) -> int:
    """A node's attempt (with its `at`) and its snapshot, in the caller's transaction; the snapshot's id."""
    inserts = _inserts(connection.dialect)
    inserts.many(connection, ATTEMPTS, [stored(ATTEMPTS, {**ATTEMPT_NULLABLE, **attempt})])
    return inserts.one(connection, SNAPSHOTS, stored(SNAPSHOTS, snapshot))


def run_status(connection: Connection, run_id: int) -> str | None:
    """Run `run_id`'s status in the caller's transaction (inserts.Inserts.run_status)."""
    return _inserts(connection.dialect).run_status(connection, run_id)


def newest_snapshot(connection: Connection, run_id: int, node: str) -> int | None:
    """Node `node`'s newest snapshot of run `run_id` in the caller's transaction (inserts.Inserts.newest_snapshot)."""
    return _inserts(connection.dialect).newest_snapshot(connection, run_id, node)


_PREPARED: weakref.WeakKeyDictionary[Dialect, Inserts] = weakref.WeakKeyDictionary()  # an engine's, while it lives


def _inserts(dialect: Dialect) -> Inserts:
    if dialect not in _PREPARED:
        _PREPARED[dialect] = Inserts(dialect)
    return _PREPARED[dialect]
