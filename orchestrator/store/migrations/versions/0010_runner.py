"""Who ran a node's cell stages: its python3 (noderunner.py) or its shell

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30 23:59:00.000000

`runner` on a node snapshot: "python3 PATH" where the node's cells went to
noderunner.py in that interpreter, "shell" where they went to the POSIX shell
scripts. Snapshots written before this revision have none (NULL): the shell.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("node_snapshots", schema=None) as batch_op:
        batch_op.add_column(sa.Column("runner", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node_snapshots", schema=None) as batch_op:
        batch_op.drop_column("runner")
