"""One table per fact: cursors, failures and generations lose their pipeline copies

``pipeline_generations`` copied ``active_generations``, ``pipeline_cursors``
copied ``l1_cursors``, and ``pipeline_sessions``/``pipeline_users`` held a
second count of failures, cursors and run times. The pipeline now reads
those from their one table for the user's active generation, so the copies
go; ``derive_failures`` is kept per generation (what the pipeline reports is
the active generation's). All are projections: the tables are emptied here
and the store rebuilds them from the log on the next open (their
checkpoints are forgotten by ``memstore.db.migrate``).

Revision ID: 0011_projections
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_projections"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _failures(per_generation: bool) -> None:
    key = ["user_id", "stage", "session_id"] + (["generation"] if per_generation else [])
    extra = (
        [sa.Column("generation", sa.Integer(), autoincrement=False, nullable=False)]
        if per_generation
        else []
    )
    op.create_table(
        "derive_failures",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("stage", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        *extra,
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("updated_position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint(*key, name=op.f("pk_derive_failures")),
    )


def upgrade() -> None:
    op.drop_table("pipeline_generations")
    op.drop_table("pipeline_cursors")
    op.drop_table("pipeline_users")
    op.drop_table("pipeline_sessions")
    op.create_table(
        "pipeline_sessions",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("last_capture_position", sa.Integer(), nullable=False),
        sa.Column("last_activity_at", sa.Text(), nullable=False),
        sa.Column("ended_at", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("user_id", "session_id", name=op.f("pk_pipeline_sessions")),
    )
    op.drop_table("derive_failures")
    _failures(per_generation=True)
    # l1_cursors keeps its columns but counts only extractions that moved the
    # cursor: the new ``l1_cursors`` projection has no checkpoint yet, so the
    # store rebuilds it (and ``generations``) on open.


def downgrade() -> None:
    op.drop_table("derive_failures")
    _failures(per_generation=False)
    op.drop_table("pipeline_sessions")
    op.create_table(
        "pipeline_sessions",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("rounds_pending", sa.Integer(), nullable=False),
        sa.Column("messages_pending", sa.Integer(), nullable=False),
        sa.Column("cursor_position", sa.Integer(), nullable=False),
        sa.Column("extractions", sa.Integer(), nullable=False),
        sa.Column("last_capture_position", sa.Integer(), nullable=False),
        sa.Column("last_activity_at", sa.Text(), nullable=False),
        sa.Column("last_l1_at", sa.Text(), nullable=True),
        sa.Column("last_l1_position", sa.Integer(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_failure_at", sa.Text(), nullable=True),
        sa.Column("ended_at", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("user_id", "session_id", name=op.f("pk_pipeline_sessions")),
    )
    op.create_table(
        "pipeline_users",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("last_activity_at", sa.Text(), nullable=True),
        sa.Column("last_l1_at", sa.Text(), nullable=True),
        sa.Column("last_l1_position", sa.Integer(), nullable=False),
        sa.Column("last_l2_at", sa.Text(), nullable=True),
        sa.Column("last_l2_position", sa.Integer(), nullable=False),
        sa.Column("last_l3_at", sa.Text(), nullable=True),
        sa.Column("last_l3_position", sa.Integer(), nullable=False),
        sa.Column("l2_failures", sa.Integer(), nullable=False),
        sa.Column("l3_failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_pipeline_users")),
    )
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
    # The older code keeps l1_cursors and active_generations in its L1
    # projection and counts every extraction as a run: let it rebuild them.
    op.execute(
        "DELETE FROM projection_checkpoints "
        "WHERE name IN ('l1_memories', 'pipeline_state', 'derive_failures')"
    )
