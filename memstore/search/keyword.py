"""Keyword search: the ranking that fits the backend's full-text index.

Every keyword search (conversation and memory search, derivation's look-up
of related memories) comes here, so the choice is made in one place: by the
index the backend keeps (``Backend.keyword_index``), never by engine name.
"""

from __future__ import annotations

from sqlalchemy import Connection

from memstore.db import backend
from memstore.search import bm25, bm25_memories, keyword_pg
from memstore.search.postings import HotPostings


def read_ahead(conn: Connection, kind: str, user_id: str) -> None:
    """A keyword search of ``user_id``'s ``kind`` follows in this
    transaction: where the backend answers in round trips (PostgreSQL), its
    first read travels with the transaction's next one."""
    if backend.of(conn).keyword_index == "tsvector":
        keyword_pg.read_ahead(conn, kind, user_id)


def search(
    conn: Connection,
    kind: str,
    query: str,
    user_id: str,
    k: int,
    *,
    l1_filter: str,
    hot: HotPostings | None = None,
    session_id: str | None = None,
    type_: str | None = None,
    scene: str | None = None,
) -> list[tuple[int, float]]:
    """``(row id, score)`` of ``user_id``'s best ``k`` rows of ``kind`` ("l0"
    messages, "l1" memories) for ``query``, best first, lower score better.
    ``l1_filter`` is the caller's SQL condition on memories ``m`` (which
    generation and status count); it is code, never user input."""
    index = backend.of(conn).keyword_index
    if index == "tsvector":
        return keyword_pg.keyword(
            conn,
            kind,
            query,
            user_id,
            k,
            l1_filter=l1_filter,
            session_id=session_id,
            type_=type_,
            scene=scene,
        )
    if index != "fts5":
        raise ValueError(f"no keyword ranking for a {index!r} index")
    if kind == "l0":
        # Ranked with the user's own statistics, reading only the user's
        # postings (memstore.search.bm25).
        return bm25.keyword_messages(conn, query, user_id, k, session_id=session_id, hot=hot)
    # Memories likewise: the user's rowid range of l1_fts, the user's
    # statistics (memstore.search.bm25_memories).
    return bm25_memories.keyword_memories(
        conn, query, user_id, k, live=l1_filter, type_=type_, scene=scene
    )
