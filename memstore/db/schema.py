"""Table definitions (SQLAlchemy Core). The Alembic revisions create exactly these.

Virtual tables (FTS5, sqlite-vec vec0) and their shadow tables are created by
raw SQL in migrations or at run time, and ``include_name`` keeps autogenerate
away from them: they cannot be reflected, renamed or batch-altered safely.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
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
        postgresql_where=text("idempotency_key IS NOT NULL"),
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
    # No content hash: 65 B a message for a key computed from ``text`` in a
    # microsecond where needed (migration 0019_storage dropped it).
    # The participant's name when the host gives one (OpenAI's "name" field).
    Column("speaker", Text, nullable=True),
    # 1 for content-free chat replies ("Noted.", "ok", emoji): ranked after
    # content and kept out of neighbour scoring (memstore.text.info).
    Column("low_info", Integer, nullable=False, server_default="0"),
    # Hosts often number messages per session, so ids are unique per session.
    UniqueConstraint("user_id", "session_id", "message_id"),
    Index("ix_l0_messages_user_id_session_id_position", "user_id", "session_id", "position"),
    Index("ix_l0_messages_user_id_occurred_at", "user_id", "occurred_at"),
)

# A small number per user, in order of the user's first message: l0_fts rows
# are keyed ``slot << 40 | l0_messages.id`` (memstore.derive.messages.keywords.fts_key), so
# one user's messages are one contiguous FTS rowid range and a keyword match
# reads only that range, whatever the other users store.
l0_user_slots = Table(
    "l0_user_slots",
    metadata,
    Column("user_id", Text, primary_key=True),
    Column("slot", Integer, nullable=False),
    # The user's message count and FTS5 token total, for BM25's average
    # length (memstore.search.bm25).
    Column("docs", Integer, nullable=False, server_default="0"),
    Column("tokens", Integer, nullable=False, server_default="0"),
    UniqueConstraint("slot"),
)

# The terms a message holds more than once, for BM25's term frequency
# (memstore.text.terms); only messages that have any get a row. Keyed like
# its l0_fts row, so one user's rows are one contiguous range.
l0_term_repeats = Table(
    "l0_term_repeats",
    metadata,
    Column(
        "key", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=False
    ),
    Column("repeats", Text, nullable=False),
)

# The highest l0_messages id whose keyword rows (l0_fts, l0_term_repeats and
# the l0_user_slots totals) are written; one row. On SQLite with a background
# indexer a capture leaves them to the indexer and keyword search scores the
# messages after it from their text (memstore.derive.messages.keywords).
# Empty on PostgreSQL, which writes them with the messages.
l0_keyword_cursor = Table(
    "l0_keyword_cursor",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column(
        "through",
        BigInteger().with_variant(Integer(), "sqlite"),
        nullable=False,
        server_default="0",
    ),
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
    # Bumped whenever the space is emptied (rebuild, erasure): an indexer batch
    # read before a reset must not write its vectors after it.
    Column("epoch", Integer, nullable=False),
    # Bumped when a vector is written below ``cursor`` (a quarantined row
    # embedded later): in-memory copies of large partitions reload then.
    Column("rewrites", Integer, nullable=False, server_default="0"),
    Column("created_at", Text, nullable=False),
    # How the table stores its vectors (memstore.db.elements): a space
    # keeps the element type it was made with; spaces from before int8
    # existed are float32.
    Column("element", Text, nullable=False, server_default="float32"),
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

# Source rows the indexer could not embed (a NaN vector, an input the model
# rejects): set aside so one bad row never stops indexing for everyone, and
# retried after ``retry_after`` (with back-off). Content-free: ids, hash, error.
vector_quarantine = Table(
    "vector_quarantine",
    metadata,
    Column("space", Text, primary_key=True),
    Column("source_id", Integer, primary_key=True),
    Column("user_id", Text, nullable=False),
    Column("content_hash", Text, nullable=False),
    Column("error", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("first_failed_at", Text, nullable=False),
    Column("retry_after", Text, nullable=False),
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

# L1's counterpart of l0_user_slots, filled by the L1 projection in order of
# each user's first memory (a user may have memories and no messages): l1_fts
# rows are keyed ``slot << 40 | l1_memories.id``
# (memstore.derive.memories.fts_index), so a keyword match reads one user's
# range. ``docs`` / ``tokens``: the user's l1_fts rows (every generation, as
# FTS5 counts them) and their token total, for BM25 with the user's own
# statistics (memstore.search.bm25_memories).
l1_user_slots = Table(
    "l1_user_slots",
    metadata,
    Column("user_id", Text, primary_key=True),
    Column("slot", Integer, nullable=False),
    Column("docs", Integer, nullable=False, server_default="0"),
    Column("tokens", Integer, nullable=False, server_default="0"),
    UniqueConstraint("slot"),
)

# The terms a memory's FTS row holds more than once (memstore.text.terms),
# keyed like that l1_fts row; only rows that have any get one.
l1_term_repeats = Table(
    "l1_term_repeats",
    metadata,
    Column(
        "key", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=False
    ),
    Column("repeats", Text, nullable=False),
)

# Which derivation generation each user's L1/L2/L3 projections show.
active_generations = Table(
    "active_generations",
    metadata,
    Column("user_id", Text, primary_key=True),
    Column("generation", Integer, nullable=False),
)

# --- derivation state, L2 scenes, L3 persona (projections of derive events) ---

# Extraction cursor per (user, session, generation): the highest l0.captured
# position an l1.extracted event covered; ``runs`` counts the extractions that
# moved it (the warm-up step) and ``updated_position`` is the last of them.
# The one record of cursors: the pipeline reads the active generation's.
l1_cursors = Table(
    "l1_cursors",
    metadata,
    Column("user_id", Text, primary_key=True),
    Column("session_id", Text, primary_key=True),
    Column("generation", Integer, primary_key=True),
    Column("cursor_position", Integer, nullable=False),
    Column("runs", Integer, nullable=False),
    Column("last_run_id", Text, nullable=False),
    Column("updated_position", Integer, nullable=False),
)

# Every derivation generation a re-derive started, and when it was activated.
derive_generations = Table(
    "derive_generations",
    metadata,
    Column("user_id", Text, primary_key=True),
    Column("generation", Integer, primary_key=True),
    Column("from_layer", Text, nullable=False),
    Column("base_generation", Integer, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("started_position", Integer, nullable=False),
    Column("activated_position", Integer, nullable=True),
)

# Consecutive failed runs per (user, stage, session, generation); a success
# of that stage and generation removes the row. The one record of failures:
# the live pipeline reads the rows of the user's active generation.
derive_failures = Table(
    "derive_failures",
    metadata,
    Column("user_id", Text, primary_key=True),
    Column("stage", Text, primary_key=True),
    Column("session_id", Text, primary_key=True),
    Column("generation", Integer, primary_key=True, autoincrement=False),
    Column("failures", Integer, nullable=False),
    Column("last_error", Text, nullable=False),
    Column("updated_position", Integer, nullable=False),
)

l2_scenes = Table(
    "l2_scenes",
    metadata,
    Column("scene_id", Text, primary_key=True),
    Column("user_id", Text, nullable=False),
    Column("generation", Integer, nullable=False),
    Column("name", Text, nullable=False),
    Column("summary", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("heat", Integer, nullable=False),
    Column("memory_ids", Text, nullable=False),
    Column("created_position", Integer, nullable=False),
    Column("updated_position", Integer, nullable=False),
    # Every memory whose text the scene's text was built from (the placed ones
    # and, for an LLM run, every memory its prompt showed): what a forget of a
    # memory makes stale (memstore/derive/follow.py).
    Column("source_memory_ids", Text, nullable=False, server_default="[]"),
    Index("ix_l2_scenes_user_id_generation", "user_id", "generation"),
)

# Per (user, generation): how far the scene step got through L1, and whether it
# asked for a persona refresh that has not happened yet.
l2_state = Table(
    "l2_state",
    metadata,
    Column("user_id", Text, primary_key=True),
    Column("generation", Integer, primary_key=True),
    Column("memory_cursor", Integer, nullable=False),
    Column("runs", Integer, nullable=False),
    Column("refresh_requested", Integer, nullable=False),
    Column("last_run_id", Text, nullable=False),
    Column("updated_position", Integer, nullable=False),
)

l3_persona = Table(
    "l3_persona",
    metadata,
    Column("user_id", Text, primary_key=True),
    Column("generation", Integer, primary_key=True),
    Column("persona", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("deriver", Text, nullable=False),
    Column("model", Text, nullable=False),
    Column("prompt_version", Text, nullable=False),
    Column("trigger", Text, nullable=False),
    Column("updated_position", Integer, nullable=False),
    # JSON list of the memories the persona text was built from; NULL when
    # unknown (written before this was recorded): any forget makes it stale.
    Column("memory_ids", Text, nullable=True),
)

# --- pipeline: scheduling state (memstore/pipeline) --------------------------

# Projection (inline): per (user, session) capture activity. Cursors,
# failures and pending counts are not copied here: ``pipeline/state.py``
# reads them from ``l1_cursors``, ``derive_failures`` and ``pipeline_pending``
# for the user's active generation, so each fact has one table.
pipeline_sessions = Table(
    "pipeline_sessions",
    metadata,
    Column("user_id", Text, primary_key=True),
    Column("session_id", Text, primary_key=True),
    Column("last_capture_position", Integer, nullable=False),
    Column("last_activity_at", Text, nullable=False),
    Column("ended_at", Text, nullable=True),
)

# Projection (inline): the upstream's per-session message buffer, one row per
# l0.captured; rows after the active generation's cursor are what is pending
# (all rows are kept so activating another generation can recount).
pipeline_pending = Table(
    "pipeline_pending",
    metadata,
    Column("user_id", Text, primary_key=True),
    Column("session_id", Text, primary_key=True),
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("rounds", Integer, nullable=False),
    Column("messages", Integer, nullable=False),
)

# Operational (not a projection): queued derivation work, claimed inside
# BEGIN IMMEDIATE. The reconciler can rebuild it from pipeline_sessions.
pipeline_queue = Table(
    "pipeline_queue",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("user_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("stage", Text, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("run_after", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("claimed_by", Text, nullable=True),
    Column("claimed_until", Text, nullable=True),
    Column("last_error", Text, nullable=True),
    Index("ix_pipeline_queue_priority_created_at_id", "priority", "created_at", "id"),
    # At most one unclaimed item per (user, session, stage): enqueue dedupes.
    Index(
        "uq_pipeline_queue_open",
        "user_id",
        "session_id",
        "stage",
        unique=True,
        sqlite_where=text("claimed_by IS NULL"),
        postgresql_where=text("claimed_by IS NULL"),
    ),
    # The earliest due unclaimed item (queue.next_run_after), from the first
    # index entry instead of a sort of every queued item (0021_capture).
    Index(
        "ix_pipeline_queue_next",
        "run_after",
        sqlite_where=text("claimed_by IS NULL"),
        postgresql_where=text("claimed_by IS NULL"),
    ),
)

# Operational: locks and leases with a time to live (a dead holder's expire).
pipeline_locks = Table(
    "pipeline_locks",
    metadata,
    Column("key", Text, primary_key=True),
    Column("owner", Text, nullable=False),
    Column("expires_at", Text, nullable=False),
    Column("acquired_at", Text, nullable=False),
)

# --- erasure ---------------------------------------------------------------

# Not a projection: a durable to-do written in the same transaction as an
# erasure, saying the file still has to be vacuumed and its WAL truncated
# before the erased bytes are gone. ``Store.open``/``close`` and the next
# write finish the job (memstore/forgetting/erasure.py). One row at most; no content.
erasure_compaction = Table(
    "erasure_compaction",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("requested_at", Text, nullable=False),
    Column("tombstone_position", Integer, nullable=False),
    Column("vacuumed", Integer, nullable=False, server_default="0"),
)
