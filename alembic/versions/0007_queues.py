"""Queues (issue 18): the quota tree an admin defines over the API in local mode.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "queues",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("parent", sa.String(length=63), nullable=True),
        sa.Column("guarantee", sa.JSON(), nullable=True),
        sa.Column("limit", sa.JSON(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("tenants", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("queues")
