"""Metric values from before the cells' JIT cache was switched off are no baseline

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 23:00:00.000000

From this revision on every process of a cell runs with CUDA_CACHE_DISABLE=1
(scheduler.CELL_ENV): a kernel shipped as PTX is compiled on each run, where it
was compiled once per machine before. A run's seconds are measured differently
from here, so the values of earlier results stay on record (trends show them)
but are no baseline: `farm_meta` key `metric_baseline_from` holds the first
result id whose values are (Store.metric_baseline).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    first = op.get_bind().execute(sa.text("SELECT COALESCE(MAX(id), 0) + 1 FROM results")).scalar_one()
    op.execute(
        sa.text("INSERT INTO farm_meta (key, value) VALUES ('metric_baseline_from', :first)").bindparams(
            first=str(first)
        )
    )


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM farm_meta WHERE key = 'metric_baseline_from'"))
