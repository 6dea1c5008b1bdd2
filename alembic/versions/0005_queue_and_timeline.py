"""Queue positions and job timelines: a waiting job's position in the policy's order,
and on its events who took its GPUs and where it ran.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("queue_position", sa.Integer(), nullable=True))
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("by_jobs", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("allocation", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.drop_column("allocation")
        batch_op.drop_column("by_jobs")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("queue_position")
