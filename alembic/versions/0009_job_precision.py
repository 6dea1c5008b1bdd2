"""A job's training precision (issue 27): `jobs.precision`, tf32 for the rows before it
(controller.model.precision's default, what their speeds assumed).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column(
        "jobs",
        sa.Column("precision", sa.String(length=8), server_default="tf32", nullable=False),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_column("jobs", "precision")
