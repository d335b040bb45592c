"""Whether a pass was judged with the CUDA-error rule waived, as a column of its own

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 09:00:00.000000

`results.cuda_waived`: a pass (fixed, perf-regression) judged with `cuda_error_text: expected`
(cuda_waiver.py). It was recognized by the waiver's note standing in the result's expected_reason,
so a reason that merely held the note's words read as waived, and a rewording of the note would
have made every stored waived pass read strict (review 111). Earlier rows get it by that rule,
applied here once, with the note's words as the farm wrote them up to this revision; from here on
the flag is written from the expectation itself.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# cuda_waiver.NOTE and PASSED when this revision was made: the rows before it were written with these
# words, whatever the module says later
NOTE = "CUDA's error text declared expected (`cuda_error_text: expected`): the CUDA-error rule is waived"
PASSED = ("pass", "fixed", "perf-regression")


def upgrade() -> None:
    # ALTER TABLE ADD COLUMN on SQLite too: batch's "auto" would copy the whole table for a default
    # that is an expression (false()), and dropping the old one breaks the foreign keys of
    # metric_values and sass_counts to it (FOREIGN KEY constraint failed); a constant default needs no copy
    with op.batch_alter_table("results", schema=None, recreate="never") as batch_op:
        batch_op.add_column(sa.Column("cuda_waived", sa.Boolean(), nullable=False, server_default=sa.false()))
    # the note's words as a bound value, matched by instr/strpos (not LIKE: the note holds `_`, a wildcard)
    found = "instr(expected_reason, :note) > 0"
    if op.get_bind().dialect.name == "postgresql":
        found = "strpos(expected_reason, :note) > 0"
    op.execute(
        sa.text(f"UPDATE results SET cuda_waived = :waived WHERE outcome IN :passed AND {found}").bindparams(
            sa.bindparam("passed", expanding=True), waived=True, note=NOTE, passed=list(PASSED)
        )
    )


def downgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_column("cuda_waived")
