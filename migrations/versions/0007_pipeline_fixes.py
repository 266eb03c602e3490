"""Pipeline state per derivation generation: pipeline_cursors, pipeline_generations

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pipeline_cursors",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("cursor_position", sa.Integer(), nullable=False),
        sa.Column("extractions", sa.Integer(), nullable=False),
        sa.Column("last_l1_at", sa.Text(), nullable=True),
        sa.Column("last_l1_position", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint(
            "user_id", "session_id", "generation", name=op.f("pk_pipeline_cursors")
        ),
    )
    op.create_table(
        "pipeline_generations",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_pipeline_generations")),
    )
    # The tables are filled by rebuilding the pipeline_state projection, which
    # the store does on open (its projection version was bumped with this
    # revision).


def downgrade() -> None:
    op.drop_table("pipeline_generations")
    op.drop_table("pipeline_cursors")
