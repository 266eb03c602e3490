"""l0_messages.speaker: the participant name a host gave (OpenAI's "name")

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN: batch mode would copy the table, and nothing here
    # needs that (no constraint changes).
    op.add_column("l0_messages", sa.Column("speaker", sa.Text(), nullable=True))
    # Existing rows get their speaker on the next rebuild of l0_messages
    # (the projection version is bumped with this revision).


def downgrade() -> None:
    with op.batch_alter_table("l0_messages") as batch:
        batch.drop_column("speaker")
