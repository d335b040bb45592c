"""The environment a run's cells ran with, on the run: what makes its metric values comparable

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 03:00:00.000000

`runs.cell_env`: the variables every process of the run's cells carried
(scheduler.CELL_ENV, "CUDA_CACHE_DISABLE=1"). A metric's values judge only
values of runs with the same one (Store.metric_baseline). 0011 told them apart
by result id (`farm_meta.metric_baseline_from`), which a run imported later from
an older farm's journal (`farm import`) passed: its results get new ids. Runs
with results from that id on that also started after every run before it are
taken for runs with the JIT cache off (a journal imported between 0011 and this
revision was of a run that started earlier, as a rule: it stays NULL; one that
started later on another machine cannot be told apart). Earlier runs, and runs
imported from journals that do not say, have none (NULL).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

JIT_CACHE_OFF = "CUDA_CACHE_DISABLE=1"  # scheduler.CELL_ENV when this revision was made


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cell_env", sa.Text(), nullable=True))
    cut = "(SELECT CAST(value AS INTEGER) FROM farm_meta WHERE key = 'metric_baseline_from')"
    last_before = f"(SELECT MAX(started_at) FROM runs WHERE id IN (SELECT run_id FROM results WHERE id < {cut}))"
    op.execute(
        sa.text(
            f"UPDATE runs SET cell_env = :env WHERE id IN (SELECT run_id FROM results WHERE id >= {cut}) "
            f"AND ({last_before} IS NULL OR started_at > {last_before})"
        ).bindparams(env=JIT_CACHE_OFF)
    )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("cell_env")
