"""Record what each scene and persona was built from (forgetting follows it)

``l2_scenes.source_memory_ids`` lists every memory whose text a scene's text
came from; ``l3_persona.memory_ids`` the same for the persona (NULL: not
known, so any forget re-derives it). Both are projections of the log: the
columns are added empty here and filled by replaying the scene and persona
events, which is what a rebuild does.

Revision ID: 0022_forget
Revises: 0021_capture
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022_forget"
down_revision: str | None = "0021_capture"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "l2_scenes",
        sa.Column("source_memory_ids", sa.Text(), nullable=False, server_default="[]"),
    )
    op.add_column("l3_persona", sa.Column("memory_ids", sa.Text(), nullable=True))
    conn = op.get_bind()
    # Until the projections are replayed the placed memories are the best
    # known sources of a scene; a persona's stay unknown (NULL).
    conn.exec_driver_sql("UPDATE l2_scenes SET source_memory_ids = memory_ids")


def downgrade() -> None:
    with op.batch_alter_table("l3_persona") as batch:
        batch.drop_column("memory_ids")
    with op.batch_alter_table("l2_scenes") as batch:
        batch.drop_column("source_memory_ids")
