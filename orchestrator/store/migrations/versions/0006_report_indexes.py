"""Indexes for the report: a cell's results, a run's cells, the certifying passes

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 10:00:00.000000

The report (issue 11) reads the fleet's standing, each result's previous
results, a run's matrix and counts, and the ledger's certifying passes; each of
these is answered from one of these indexes alone, without reading the results'
rows (whose logs are stored inline), so a render reads what the latest run needs
rather than the whole history. No data changes.
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

INDEXES = {
    "ix_results_cell": ["kernel", "variant", "node", "device", "run_id", "outcome"],
    "ix_results_run_cell": ["run_id", "kernel", "variant", "node", "device", "outcome"],
    "ix_results_certifying": ["outcome", "contract_expected", "real_gpu", "kernel", "identity", "cc", "started_at"],
}


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "results", columns)


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="results")
