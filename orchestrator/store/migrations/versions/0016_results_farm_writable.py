"""Whether a result's code ran unconfined on the farm's own machine: such a pass certifies nothing

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-08 09:00:00.000000

`results.farm_writable`: the cell's code ran unconfined (the shell runner, a node kernel without
Landlock) on a `local` node, as the farm's own Unix user, who can write this database, its journal
and the reports by path (red-team round 135): its pass is evidence the farm cannot back, so it
certifies nothing (Store._certifying, review 137). Earlier rows get it from what they stored: their
snapshot's transport, and the stage detail the farm wrote of an unconfined run or sanitizer run
("... ran unconfined (why): ..."), applied here once; from here on it is written with the result.
Both indexes that say what certifies carry it, so those reads stay on the index alone.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# base._note_confinement's words up to this revision ("the kernel ran unconfined (",
# "its sanitizer runs ran unconfined ("), as they stand in results.stage_details
SAID = " ran unconfined ("
RUN_CELL = ["run_id", "kernel", "variant", "node", "device", "outcome", "real_gpu"]
CERTIFYING = ["outcome", "contract_expected", "real_gpu", "kernel", "identity", "cc", "started_at", "run_id"]


def upgrade() -> None:
    # a constant default: ALTER TABLE ADD COLUMN, no copy of the table (0015 says why)
    with op.batch_alter_table("results", schema=None, recreate="never") as batch_op:
        batch_op.add_column(sa.Column("farm_writable", sa.Boolean(), nullable=False, server_default=sa.false()))
    found = "instr(stage_details, :said) > 0"
    if op.get_bind().dialect.name == "postgresql":
        found = "strpos(CAST(stage_details AS TEXT), :said) > 0"
    local = "snapshot_id IN (SELECT id FROM node_snapshots WHERE transport = 'local')"
    op.execute(
        sa.text(f"UPDATE results SET farm_writable = :yes WHERE {local} AND {found}").bindparams(yes=True, said=SAID)
    )
    op.drop_index("ix_results_run_cell", table_name="results")
    op.create_index("ix_results_run_cell", "results", [*RUN_CELL, "farm_writable"])
    op.drop_index("ix_results_certifying", table_name="results")
    op.create_index("ix_results_certifying", "results", [*CERTIFYING[:3], "farm_writable", *CERTIFYING[3:]])


def downgrade() -> None:
    op.drop_index("ix_results_certifying", table_name="results")
    op.create_index("ix_results_certifying", "results", CERTIFYING)
    op.drop_index("ix_results_run_cell", table_name="results")
    op.create_index("ix_results_run_cell", "results", RUN_CELL)
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_column("farm_writable")
