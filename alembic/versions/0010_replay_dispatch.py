"""Replays: when the dispatcher last sent a queued replay to a runner and how many
times (issue 28), so that one whose task was lost is sent again or failed.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("replays", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(
            sa.Column("dispatches", sa.Integer(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("replays", schema=None) as batch_op:
        batch_op.drop_column("dispatches")
        batch_op.drop_column("dispatched_at")
