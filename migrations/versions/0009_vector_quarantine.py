"""Vector quarantine: rows the indexer could not embed, retried later

Revision ID: 0009
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "vector_quarantine",
        sa.Column("space", sa.Text(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("first_failed_at", sa.Text(), nullable=False),
        sa.Column("retry_after", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("space", "source_id", name=op.f("pk_vector_quarantine")),
    )


def downgrade() -> None:
    # A cache of failures: dropping it only means the rows are retried.
    op.drop_table("vector_quarantine")
