"""Ids, byte sizes and instruction counts are 64-bit on PostgreSQL (BIGINT), as SQLite's INTEGER already is

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-10 09:00:00.000000

PostgreSQL's INTEGER is 32 bits: a node's bytes shipped past 2 GiB, an instruction count past
2147483647 were cut to 2147483647 (result_rows.fit, on both backends), and a table's ids stopped at
2147483647 ("nextval: reached maximum value of sequence", every later write refused: red-team 242).
On PostgreSQL each such column becomes BIGINT, and each table's id sequence runs to 2**63 - 1, as a
new database's BIGSERIAL does (tables.Wide). SQLite keeps INTEGER (64 bits, and only INTEGER PRIMARY
KEY numbers rows itself): nothing to do there.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# each table's columns that widen, its id first
WIDE = {
    "runs": ["id"],
    "node_snapshots": ["id", "run_id", "bytes_shipped"],
    "results": ["id", "run_id", "snapshot_id", "stdout_size", "stderr_size"],
    "planned_cells": ["id", "run_id"],
    "attempts": ["id", "run_id"],
    "metric_values": ["id", "result_id", "run_id"],
    "sass_counts": ["id", "result_id", "count"],
}


def _alter(to: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in WIDE.items():
        # one ALTER TABLE a table: its rows are rewritten once, not once per column
        changes = ", ".join(f'ALTER COLUMN "{column}" TYPE {to}' for column in columns)
        op.execute(sa.text(f'ALTER TABLE "{table}" {changes}'))
        sequence = op.get_bind().scalar(sa.text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": table})
        if sequence is not None:
            op.execute(sa.text(f"ALTER SEQUENCE {sequence} AS {to}"))


def upgrade() -> None:
    _alter("BIGINT")


def downgrade() -> None:
    _alter("INTEGER")
