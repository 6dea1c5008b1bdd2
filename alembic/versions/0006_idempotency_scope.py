"""Idempotency keys on replays and sweeps too: the route a key was used on (`scope`),
and `job_id` only for jobs.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the keys stored so far were all used on POST /jobs."""
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("scope", sa.String(length=32), server_default="jobs", nullable=False)
        )
        batch_op.alter_column("job_id", existing_type=sa.String(length=32), nullable=True)


def downgrade() -> None:
    """Downgrade schema: the keys of replays and sweeps go (0005 knows jobs only)."""
    op.execute(sa.text("DELETE FROM idempotency_keys WHERE scope <> 'jobs'"))
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.alter_column("job_id", existing_type=sa.String(length=32), nullable=False)
        batch_op.drop_column("scope")
