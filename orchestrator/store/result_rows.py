"""A cell's result and the rows beside it (metric values, instruction counts, attempts), written
in the caller's transaction on the driver's cursor (inserts.py)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import Connection, Dialect

from orchestrator.store.inserts import Inserts
from orchestrator.store.tables import Attempt, MetricValue, NodeSnapshotRow, PlannedCell, ResultRow, SassCount


def no_nul(params: dict[str, Any]) -> dict[str, Any]:
    # PostgreSQL's text cannot hold NUL (SQLite's can): show it as U+FFFD rather than lose the row
    return {
        key: value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value
        for key, value in params.items()
    }


# A result's rows are written by inserts.py (SQLAlchemy's SQL and value conversions, the
# driver's execution): a result is written many times a second on a big fleet, and the
# ORM's unit of work, then Core's execution, cost more CPU than the rows themselves
RESULTS: Table = ResultRow.__table__
METRICS: Table = MetricValue.__table__
SASS: Table = SassCount.__table__
ATTEMPTS: Table = Attempt.__table__
INSERT_SNAPSHOT = NodeSnapshotRow.__table__.insert()
INSERT_PLANNED = PlannedCell.__table__.insert()
ATTEMPT_NULLABLE = {"kernel": None, "variant": None, "stage": None, "error": None}  # one key set: one executemany


def insert_result(
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
    clean = no_nul if postgres else dict
    inserts = _inserts(connection.dialect)
    result_id = inserts.one(connection, RESULTS, clean(fields))
    key = {
        "result_id": result_id,
        "run_id": fields["run_id"],
        "kernel": fields["kernel"],
        "variant": fields["variant"],
        "node": fields["node"],
        "device": fields.get("device", ""),
    }
    inserts.many(connection, METRICS, [clean({**key, **metric}) for metric in metrics])
    if counts := fields.get("instruction_counts"):
        identity = fields.get("identity")
        inserts.many(
            connection,
            SASS,
            [
                clean({"result_id": result_id, "identity": identity, "instruction": name, "count": count})
                for name, count in counts.items()
            ],
        )
    inserts.many(connection, ATTEMPTS, [clean({**ATTEMPT_NULLABLE, **attempt}) for attempt in attempts])
    return result_id


_PREPARED: weakref.WeakKeyDictionary[Dialect, Inserts] = weakref.WeakKeyDictionary()  # an engine's, while it lives


def _inserts(dialect: Dialect) -> Inserts:
    if dialect not in _PREPARED:
        _PREPARED[dialect] = Inserts(dialect)
    return _PREPARED[dialect]
