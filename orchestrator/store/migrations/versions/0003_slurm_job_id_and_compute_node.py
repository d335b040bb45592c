"""Slurm: the job id and compute node of each result

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 14:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("slurm_job_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("compute_node", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_column("compute_node")
        batch_op.drop_column("slurm_job_id")
