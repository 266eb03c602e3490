"""L0 messages with FTS5, embedding cache, vector spaces

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from memstore._migrations.frozen.ddl import create_fts, drop_fts

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "l0_messages",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=True),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("occurred_at", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_l0_messages")),
        sa.UniqueConstraint(
            "user_id",
            "session_id",
            "message_id",
            name=op.f("uq_l0_messages_user_id_session_id_message_id"),
        ),
    )
    op.create_index(
        "ix_l0_messages_user_id_session_id_position",
        "l0_messages",
        ["user_id", "session_id", "position"],
    )
    op.create_index("ix_l0_messages_user_id_occurred_at", "l0_messages", ["user_id", "occurred_at"])
    # unicode61 for Latin scripts; the cjk column holds overlapping bigrams of
    # Han/Kana/Hangul runs, which unicode61 alone would index as one token.
    create_fts("l0_fts", ("text", "cjk"))
    op.create_table(
        "embedding_cache",
        sa.Column("model_id", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.Column("dims", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("model_id", "content_hash", name=op.f("pk_embedding_cache")),
    )
    op.create_table(
        "vector_spaces",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("model_id", sa.Text(), nullable=False),
        sa.Column("dims", sa.Integer(), nullable=False),
        sa.Column("table_name", sa.Text(), nullable=False),
        sa.Column("cursor", sa.Integer(), nullable=False),
        sa.Column("ready", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_vector_spaces")),
        sa.UniqueConstraint("table_name", name=op.f("uq_vector_spaces_table_name")),
    )
    op.create_table(
        "vector_index",
        sa.Column("space", sa.Text(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("space", "source_id", name=op.f("pk_vector_index")),
    )


def downgrade() -> None:
    conn = op.get_bind()
    # vec0 tables are made at run time, one per (kind, model); drop them by name.
    for (table_name,) in conn.execute(sa.text("SELECT table_name FROM vector_spaces")).all():
        op.execute(f'DROP TABLE IF EXISTS "{table_name}"')
    op.drop_table("vector_index")
    op.drop_table("vector_spaces")
    op.drop_table("embedding_cache")
    drop_fts("l0_fts")
    op.drop_index("ix_l0_messages_user_id_occurred_at", table_name="l0_messages")
    op.drop_index("ix_l0_messages_user_id_session_id_position", table_name="l0_messages")
    op.drop_table("l0_messages")
