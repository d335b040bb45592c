"""Speed as evidence: each result's metric values, and its SASS counts as rows

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 09:00:00.000000

`metric_values`: a job's metrics (a figure the kernel prints, or its own
seconds on the node) per passing result, with the median it was judged against
and whether it regressed (metrics.py). The cell's key is repeated from the
result so that a cell's baseline and a kernel page's trends are read from an
index alone. Results written before this revision have none.

`sass_counts`: each result's instruction counts (results.instruction_counts)
with its inputs' identity, one row per instruction, so "what changed" compares
a cell's counts with its previous result's without reading the wide results
rows (logs are stored inline). Filled here, once, for the results already on
record: the H200's HGMMA 4 is the first line of each wgmma cell's history.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

BATCH = 500


def upgrade() -> None:
    op.create_table(
        "metric_values",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kernel", sa.String(length=64), nullable=False),
        sa.Column("variant", sa.String(length=64), nullable=False),
        sa.Column("node", sa.String(length=64), nullable=False),
        sa.Column("device", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("unit", sa.String(length=32), nullable=False),
        sa.Column("better", sa.String(length=8), nullable=False),
        sa.Column("tolerance", sa.Float(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("baseline", sa.Float(), nullable=True),
        sa.Column("regressed", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["result_id"], ["results.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_metric_values_result_id", "metric_values", ["result_id"])
    op.create_index(
        "ix_metric_values_cell", "metric_values", ["kernel", "variant", "node", "device", "name", "result_id", "value"]
    )
    op.create_index("ix_metric_values_run", "metric_values", ["run_id", "kernel"])
    op.create_table(
        "sass_counts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("identity", sa.String(length=64), nullable=True),
        sa.Column("instruction", sa.Text(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["result_id"], ["results.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_sass_counts_result_id", "sass_counts", ["result_id"])

    bind = op.get_bind()
    results = sa.table(
        "results",
        sa.column("id", sa.Integer),
        sa.column("identity", sa.String),
        sa.column("instruction_counts", sa.JSON),
    )
    counts = sa.table(
        "sass_counts",
        sa.column("result_id", sa.Integer),
        sa.column("identity", sa.String),
        sa.column("instruction", sa.Text),
        sa.column("count", sa.Integer),
    )
    rows: list[dict] = []
    query = sa.select(results.c.id, results.c.identity, results.c.instruction_counts).order_by(results.c.id)
    for result_id, identity, found in bind.execute(query).all():  # read whole before writing on the connection
        for instruction, count in (found or {}).items() if isinstance(found, dict) else ():
            if isinstance(count, int) and not isinstance(count, bool):
                rows.append({"result_id": result_id, "identity": identity, "instruction": instruction, "count": count})
        if len(rows) >= BATCH:
            bind.execute(counts.insert(), rows)
            rows = []
    if rows:
        bind.execute(counts.insert(), rows)


def downgrade() -> None:
    op.drop_index("ix_sass_counts_result_id", table_name="sass_counts")
    op.drop_table("sass_counts")
    op.drop_index("ix_metric_values_run", table_name="metric_values")
    op.drop_index("ix_metric_values_cell", table_name="metric_values")
    op.drop_index("ix_metric_values_result_id", table_name="metric_values")
    op.drop_table("metric_values")
