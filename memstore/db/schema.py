"""Table definitions (SQLAlchemy Core). The Alembic revisions create exactly these.

Virtual tables (FTS5, sqlite-vec vec0) and their shadow tables are created by
raw SQL in migrations or at run time, and ``include_name`` keeps autogenerate
away from them: they cannot be reflected, renamed or batch-altered safely.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    text,
)

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

# Prefixes of tables that are virtual or belong to a virtual table; never
# touched by autogenerate.
VIRTUAL_PREFIXES = ("l0_fts", "l1_fts", "vec_", "apscheduler")


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Alembic filter: autogenerate must neither drop nor recreate virtual tables,
    their shadow tables, or APScheduler's job table (it manages its own)."""
    return not (type_ == "table" and name is not None and name.startswith(VIRTUAL_PREFIXES))

# --- the log ---------------------------------------------------------------

events = Table(
    "events",
    metadata,
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("event_id", Text, nullable=False, unique=True),
    Column("stream", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("user_id", Text, nullable=False),
    Column("payload", Text, nullable=False),
    Column("occurred_at", Text, nullable=False),
    Column("recorded_at", Text, nullable=False),
    Column("idempotency_key", Text, nullable=True),
    Column("causation_id", Text, nullable=True),
    Column("correlation_id", Text, nullable=True),
    UniqueConstraint("stream", "seq"),
    Index("ix_events_type_position", "type", "position"),
    Index("ix_events_user_id_position", "user_id", "position"),
    Index(
        "ix_events_idempotency_key",
        "idempotency_key",
        unique=True,
        sqlite_where=text("idempotency_key IS NOT NULL"),
    ),
)

projection_checkpoints = Table(
    "projection_checkpoints",
    metadata,
    Column("name", Text, primary_key=True),
    Column("position", Integer, nullable=False, server_default="0"),
    Column("version", Integer, nullable=False, server_default="0"),
)

# A projection used by tests and the event-log benchmark: counts per type/user.
event_counts = Table(
    "event_counts",
    metadata,
    Column("type", Text, primary_key=True),
    Column("user_id", Text, primary_key=True),
    Column("n", Integer, nullable=False),
    Column("last_position", Integer, nullable=False),
)

__all__ = [
    "NAMING",
    "VIRTUAL_PREFIXES",
    "event_counts",
    "include_name",
    "events",
    "metadata",
    "projection_checkpoints",
]

# --- L0: captured messages (projection of l0.captured) ----------------------

l0_messages = Table(
    "l0_messages",
    metadata,
    # Assigned in log order by the projection, so a rebuild gives the same ids.
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("user_id", Text, nullable=False),
    Column("agent_id", Text, nullable=True),
    Column("session_id", Text, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("occurred_at", Text, nullable=False),
    Column("position", Integer, nullable=False),
    Column("content_hash", Text, nullable=False),
    UniqueConstraint("user_id", "message_id"),
    Index("ix_l0_messages_user_id_session_id_position", "user_id", "session_id", "position"),
    Index("ix_l0_messages_user_id_occurred_at", "user_id", "occurred_at"),
)

# --- vectors: caches, not projections ---------------------------------------

# Embeddings keyed by (model, content hash): survives projection rebuilds, so
# replaying the log never re-embeds text it has embedded before.
embedding_cache = Table(
    "embedding_cache",
    metadata,
    Column("model_id", Text, primary_key=True),
    Column("content_hash", Text, primary_key=True),
    Column("dims", Integer, nullable=False),
    Column("vector", LargeBinary, nullable=False),
)

# One row per (kind, embedding model): which vec0 table holds its vectors, how
# far the background indexer got, and whether it is complete enough to search.
vector_spaces = Table(
    "vector_spaces",
    metadata,
    Column("name", Text, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("model_id", Text, nullable=False),
    Column("dims", Integer, nullable=False),
    Column("table_name", Text, nullable=False, unique=True),
    Column("cursor", Integer, nullable=False),
    # 1 once the indexer has caught up at least once: before that (a new
    # model re-embedding everything) search stays keyword-only.
    Column("ready", Integer, nullable=False),
    Column("created_at", Text, nullable=False),
)

# What each space has embedded, by source row and content hash (L1 rows change
# text when memories are updated; the hash tells the indexer to re-embed).
vector_index = Table(
    "vector_index",
    metadata,
    Column("space", Text, primary_key=True),
    Column("source_id", Integer, primary_key=True),
    Column("content_hash", Text, nullable=False),
)

# --- L1: atomic memories (projection of the derivation events) ---------------

l1_memories = Table(
    "l1_memories",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("memory_id", Text, nullable=False, unique=True),
    Column("user_id", Text, nullable=False),
    Column("generation", Integer, nullable=False),
    Column("type", Text, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("scene_name", Text, nullable=False),
    Column("content", Text, nullable=False),
    Column("content_hash", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("origin", Text, nullable=False),
    Column("source_message_ids", Text, nullable=False),
    Column("activity_start", Text, nullable=True),
    Column("activity_end", Text, nullable=True),
    Column("occurred_at", Text, nullable=False),
    Column("created_position", Integer, nullable=False),
    Column("updated_position", Integer, nullable=False),
    Column("retired_by", Text, nullable=True),
    Index("ix_l1_memories_user_id_generation_status", "user_id", "generation", "status"),
)

# Which derivation generation each user's L1/L2/L3 projections show.
active_generations = Table(
    "active_generations",
    metadata,
    Column("user_id", Text, primary_key=True),
    Column("generation", Integer, nullable=False),
)
