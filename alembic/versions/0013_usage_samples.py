"""Samples of the live cluster over time (issue 30 item 4): the cluster, each node
with its GPUs, and each tenant, written by api.samples every sampling period.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "cluster_samples",
        sa.Column("t_s", sa.Float(), nullable=False),
        sa.Column("step_s", sa.Float(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpus_allocated", sa.Float(), nullable=False),
        sa.Column("util", sa.Float(), nullable=True),
        sa.Column("mem_used_mib", sa.Float(), nullable=True),
        sa.Column("mem_total_mib", sa.Float(), nullable=True),
        sa.Column("gpus_unhealthy", sa.Float(), nullable=False),
        sa.Column("running", sa.Float(), nullable=False),
        sa.Column("waiting", sa.Float(), nullable=False),
        sa.Column("wait_mean_s", sa.Float(), nullable=True),
        sa.Column("wait_max_s", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("t_s"),
    )
    op.create_table(
        "node_samples",
        sa.Column("t_s", sa.Float(), nullable=False),
        sa.Column("node", sa.String(length=100), nullable=False),
        sa.Column("step_s", sa.Float(), nullable=False),
        sa.Column("gpus_allocated", sa.Float(), nullable=False),
        sa.Column("util", sa.Float(), nullable=True),
        sa.Column("mem_used_mib", sa.Float(), nullable=True),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("t_s", "node"),
    )
    op.create_table(
        "tenant_samples",
        sa.Column("t_s", sa.Float(), nullable=False),
        sa.Column("tenant", sa.String(length=100), nullable=False),
        sa.Column("step_s", sa.Float(), nullable=False),
        sa.Column("gpus", sa.Float(), nullable=False),
        sa.Column("running", sa.Float(), nullable=False),
        sa.Column("waiting", sa.Float(), nullable=False),
        sa.Column("wait_max_s", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("t_s", "tenant"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("tenant_samples")
    op.drop_table("node_samples")
    op.drop_table("cluster_samples")
