"""The capabilities a result's contract names, as values, not only as text

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 17:40:00.000000

The ledger lists, per kernel, every CC its contracts name (a contract "CC ==
9.0" plans a 9.0 column even before any result on such a card). The report read
them back out of the rendered contract text with a regex; each result now
stores them (`contract_ccs`, e.g. ["7.5"] or ["8.0", "8.9"]). Results written
before this revision get them from their contract text, once, here.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_CC = re.compile(r"\d+\.\d+")  # the rendered contract: "CC == 9.0", "CC >= 7.5 and <= 8.9", "any CC"


def upgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("contract_ccs", sa.JSON(), nullable=True))
    bind = op.get_bind()
    results = sa.table(
        "results", sa.column("id", sa.Integer), sa.column("contract", sa.String), sa.column("contract_ccs", sa.JSON)
    )
    by_text: dict[str, list[int]] = {}
    for row in bind.execute(sa.select(results.c.id, results.c.contract)):
        by_text.setdefault(row.contract or "", []).append(row.id)
    for text, ids in by_text.items():
        named = sorted(set(_CC.findall(text)), key=lambda cc: tuple(map(int, cc.split("."))))
        for start in range(0, len(ids), 500):
            bind.execute(results.update().where(results.c.id.in_(ids[start : start + 500])).values(contract_ccs=named))


def downgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_column("contract_ccs")
