"""The certifying passes' index carries their run: only finished runs certify

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 04:00:00.000000

A pass of a run that did not finish (aborted, stopped, still running, its farm
killed) certifies nothing (Store._certifying): a run that did not finish never
looks green, the ledger included. The ledger counts the certifying passes from
ix_results_certifying alone; with the run id in it, leaving out the few runs
that did not finish needs no read of the results' wide rows. No data changes.
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

BEFORE = ["outcome", "contract_expected", "real_gpu", "kernel", "identity", "cc", "started_at"]


def upgrade() -> None:
    op.drop_index("ix_results_certifying", table_name="results")
    op.create_index("ix_results_certifying", "results", [*BEFORE, "run_id"])


def downgrade() -> None:
    op.drop_index("ix_results_certifying", table_name="results")
    op.create_index("ix_results_certifying", "results", BEFORE)
