"""The run's token: the FARM_RUN marker on the nodes, and its journal's name

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 15:00:00.000000

`farm import JOURNAL` refuses a journal whose run is already in the database.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("token", sa.String(length=32), nullable=True))
        batch_op.create_index("ix_runs_token", ["token"])


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_token")
        batch_op.drop_column("token")
