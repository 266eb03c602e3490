"""Keyword search of one user's memories, ranked by BM25 with that user's statistics.

L1's counterpart of memstore.search.bm25, with the same pieces: FTS5's
``bm25()`` counted each term's memories over every user's and walked every
user's postings (about 1,800 matches per query at 10k memories, to keep the
user's few), and one user's memories changed another's ranking. Here:

- each term is matched within the user's rowid range of ``l1_fts``
  (``slot << SLOT_SHIFT | l1_memories.id``, memstore.derive.memories.fts_index),
  so FTS5 reads only the user's postings;
- lengths are FTS5's own (``l1_fts_docsize``), repeated terms come from
  ``l1_term_repeats`` (or the text, for terms whose repeats are not stored),
  the user's row and token counts from ``l1_user_slots``;
- :func:`memstore.search.bm25.rank` ranks them: the same formula, summing
  order and tie-break as for messages.

Statistics cover every row FTS5 holds for the user (all generations; retired
memories leave the index), as ``bm25()`` counts them in a store with one
user, so there the ranking is ``bm25()``'s, score for score; which rows are
returned (the live generation, type, scene) is decided after ranking, as
before. User text reaches FTS5 only as quoted terms (memstore.text.fts).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from memstore.db.sqlfn import driver_rows, limit
from memstore.derive.messages.keywords import SLOT_SHIFT
from memstore.search import bm25
from memstore.search.filters import row_filters
from memstore.search.phrases import query_phrases
from memstore.text.fts import build_match

# The user's statistics and whether anyone else has a slot, in one statement.
_STATS_AND_OTHERS = (
    "SELECT s.slot, s.docs, s.tokens, "
    "EXISTS (SELECT 1 FROM l1_user_slots o WHERE o.slot != s.slot) "
    "FROM l1_user_slots s WHERE s.user_id = :u"
)


def keyword_memories(
    conn: Connection,
    query: str,
    user_id: str,
    k: int,
    *,
    live: str,
    type_: str | None = None,
    scene: str | None = None,
    sole_user_shortcut: bool = True,
) -> list[tuple[int, float]]:
    """``(l1_memories id, -score)`` of ``user_id``'s best ``k`` memories for
    ``query``, best first (negative like ``bm25()``: lower is better).
    ``live`` is the caller's SQL condition on the memory ``m`` (which
    generation and status count); it is code, never user input.
    ``sole_user_shortcut=False`` ranks per user even where ``bm25()`` gives
    the same (the tests compare the two)."""
    phrases = query_phrases(query)
    if not phrases:
        return []
    # Plain SQL through driver_rows, as in bm25.keyword_messages: compiling a
    # text() clause, or SQLAlchemy's result set-up, cost more than these
    # statements.
    got = driver_rows(conn, _STATS_AND_OTHERS, {"u": user_id})
    if not got:
        return []  # no memory was ever indexed for the user
    slot, docs, tokens, others = (int(v) for v in got[0])
    lo = slot << SLOT_SHIFT
    params: dict[str, Any] = {"lo": lo, "hi": lo + (1 << SLOT_SHIFT) - 1, "u": user_id}
    kept = f"m.user_id = :u AND {live}" + row_filters("l1", params, type_=type_, scene=scene)
    if sole_user_shortcut and not others:
        # The only user: the table's statistics are the user's, and bm25()
        # computes the same ranking in C.
        return _sole_user(conn, query, params, kept, k)
    need_text = any(p.counted for p in phrases)
    sql = (
        f"{bm25.tagged_matches('l1_fts', phrases, params)} "
        f"SELECT g.r - :lo, g.a, g.b, d.sz, x.repeats, ({kept}), "
        f"{'m.content' if need_text else 'NULL'} FROM g "
        "JOIN l1_fts_docsize d ON d.id = g.r LEFT JOIN l1_term_repeats x ON x.key = g.r "
        "JOIN l1_memories m ON m.id = g.r - :lo"
    )
    rows = driver_rows(conn, sql, params)
    if not rows:
        return []
    return bm25.rank(phrases, rows, docs, tokens, k)


def _sole_user(
    conn: Connection, query: str, params: dict[str, Any], kept: str, k: int
) -> list[tuple[int, float]]:
    match = build_match(query)
    if match is None:
        return []
    params.update(q=match)
    sql = (
        "SELECT f.rowid - :lo AS id, bm25(l1_fts, 1.0, 1.0, 1.0) AS s FROM l1_fts f "
        "JOIN l1_memories m ON m.id = f.rowid - :lo "
        f"WHERE l1_fts MATCH :q AND f.rowid BETWEEN :lo AND :hi AND {kept} "
        f"ORDER BY s, f.rowid {limit(k)}"
    )
    return [(int(i), float(s)) for i, s in driver_rows(conn, sql, params)]
