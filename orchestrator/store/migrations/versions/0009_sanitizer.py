"""What compute-sanitizer said of a result's binary

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30 19:10:00.000000

A variant may ask for `sanitize: [memcheck, racecheck, ...]`: each tool's exit
code, error count and first findings are kept on the result (`sanitizer`, a
list of {tool, exit_code, errors, findings, timed_out}). Results written before
this revision, and cells not sanitized, have none (NULL).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sanitizer", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_column("sanitizer")
