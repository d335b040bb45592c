"""Per-card cells, the certificate identity, whole-stream evidence

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 14:00:00.000000

Results gain the card they ran on (device, GPU index and UUID, its CC and
whether the driver confirmed it), every dependency's digest and the
certificate identity, the build key, the whole streams' sha256, where the
kept copies were cut, and where the markers matched. Earlier results are
filled from their node snapshot (device = its GPU, cc, real_gpu); their
identity stays NULL: they were stored without the dependencies' digests, so
it cannot be recomputed honestly, and they certify nothing under it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("device", sa.String(length=255), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("gpu_index", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("gpu_uuid", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("cc", sa.String(length=8), nullable=True))
        batch_op.add_column(sa.Column("real_gpu", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.add_column(sa.Column("dependencies", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("identity", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("build_key", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("stdout_sha256", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("stderr_sha256", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("output_cuts", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("markers", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("last_stderr_line", sa.Text(), nullable=True))
        batch_op.create_index("ix_results_identity", ["identity"])
    with op.batch_alter_table("node_snapshots", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gpus", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("driver_check", sa.Text(), nullable=True))
    with op.batch_alter_table("planned_cells", schema=None) as batch_op:
        batch_op.add_column(sa.Column("device", sa.String(length=255), nullable=False, server_default=""))
    # earlier results: the card is their node's (one card model per node then)
    op.execute(
        "UPDATE results SET "
        "device = COALESCE((SELECT gpu_name FROM node_snapshots s WHERE s.id = results.snapshot_id), ''), "
        "cc = (SELECT cc FROM node_snapshots s WHERE s.id = results.snapshot_id), "
        "real_gpu = COALESCE((SELECT real_gpu FROM node_snapshots s WHERE s.id = results.snapshot_id), "
        + ("false" if op.get_bind().dialect.name == "postgresql" else "0")
        + ")"
    )
    op.execute("UPDATE results SET dependencies = '{}', output_cuts = '{}', markers = '{}'")
    op.execute("UPDATE node_snapshots SET gpus = '[]'")


def downgrade() -> None:
    with op.batch_alter_table("planned_cells", schema=None) as batch_op:
        batch_op.drop_column("device")
    with op.batch_alter_table("node_snapshots", schema=None) as batch_op:
        batch_op.drop_column("driver_check")
        batch_op.drop_column("gpus")
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_index("ix_results_identity")
        for column in (
            "last_stderr_line",
            "markers",
            "output_cuts",
            "stderr_sha256",
            "stdout_sha256",
            "build_key",
            "identity",
            "dependencies",
            "real_gpu",
            "cc",
            "gpu_uuid",
            "gpu_index",
            "device",
        ):
            batch_op.drop_column(column)
