"""A run's cells' index carries whether the driver confirmed each card

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 10:30:00.000000

Every page of a run asks which of its as-expected results stood on a card the NVIDIA driver
did not confirm (Store.unconfirmed_results: no page paints them green). real_gpu was in no
index holding the run, so each ask read all of the run's wide rows (logs are inline): 8 ms
a run of 3,200 results, asked once for each run page a cold render writes (issue 11's render
target). With real_gpu in ix_results_run_cell the ask is answered from the index alone.
No data changes.
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

BEFORE = ["run_id", "kernel", "variant", "node", "device", "outcome"]


def upgrade() -> None:
    op.drop_index("ix_results_run_cell", table_name="results")
    op.create_index("ix_results_run_cell", "results", [*BEFORE, "real_gpu"])


def downgrade() -> None:
    op.drop_index("ix_results_run_cell", table_name="results")
    op.create_index("ix_results_run_cell", "results", BEFORE)
