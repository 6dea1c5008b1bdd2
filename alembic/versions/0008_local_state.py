"""Local mode's runtime state (issue 28): the active policy, the simulated clock, and
the nodes an admin cordoned or drained, restored when `gpuflow serve` starts again.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "local_settings",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("set_by", sa.String(length=100), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "node_maintenance",
        sa.Column("node", sa.String(length=100), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("set_by", sa.String(length=100), nullable=False),
        sa.Column("sim_s", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("node"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("node_maintenance")
    op.drop_table("local_settings")
