"""A run's cells' index carries the result's identity: a pass of inputs not all identified certifies nothing

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-09 09:00:00.000000

A result whose inputs the farm did not all identify (`identity` NULL) never certified (the one rule,
Store._certifying), yet the pages painted its pass green and the exports counted it a plain pass
(review 146): report.model.unconfirmed and its SQL form (store.certifying.unconfirmed_rule) now
read the identity too, and the index a run's unconfirmed results are read from carries it, so that
read stays on the index alone (0014).
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

RUN_CELL = ["run_id", "kernel", "variant", "node", "device", "outcome", "real_gpu", "farm_writable"]


def upgrade() -> None:
    op.drop_index("ix_results_run_cell", table_name="results")
    op.create_index("ix_results_run_cell", "results", [*RUN_CELL, "identity"])


def downgrade() -> None:
    op.drop_index("ix_results_run_cell", table_name="results")
    op.create_index("ix_results_run_cell", "results", RUN_CELL)
