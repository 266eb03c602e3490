"""Keyword search of one user's messages, ranked by BM25 with that user's statistics.

FTS5's ``bm25()`` weighs each query term by its document frequency over the
whole table, which it counts by walking the term's postings for every user:
the cost grew with the store, and one user's words changed another user's
ranking. Here the same formula (FTS5's: k1 = 1.2, b = 0.75, idf floored at
1e-6, every column weight 1) runs over the user's own messages only:

- which of the user's messages hold each term: one FTS5 MATCH per term,
  limited to the user's rowid range (memstore.derive.messages.keywords.fts_key), so
  FTS5 seeks to the user's postings and reads only those;
- how often a term occurs in a message and the message's length: stored with
  the message (memstore.text.terms), or counted from its text for the few
  terms whose repeats are not stored (function words, one-character CJK
  prefixes);
- the number of messages and tokens of the user (average length): kept per
  user in ``l0_user_slots`` by the L0 projection.

For a store with one user these are FTS5's own figures, so the ranking is
``bm25()``'s, score for score. User text still reaches FTS5 only as quoted
terms (memstore.text.fts).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Connection

from memstore.db.sqlfn import driver_rows, limit
from memstore.derive.messages.keywords import SLOT_SHIFT
from memstore.search.filters import row_filters
from memstore.search.phrases import COLUMN_NAMES, Phrase, query_phrases, text_counts
from memstore.search.postings import Copy, HotPostings
from memstore.search.tail import Tail, tail_of, waiting
from memstore.text.fts import build_match

K1 = 1.2
B = 0.75
_IDF_FLOOR = 1e-6
_K1_PLUS_1 = K1 + 1.0
_STATS = "SELECT slot, docs, tokens FROM l0_user_slots WHERE user_id = :u"
# The user's statistics and whether anyone else has a slot, in one statement
# (a keyword search ran both lookups on every query).
_STATS_AND_OTHERS = (
    "SELECT s.slot, s.docs, s.tokens, "
    "EXISTS (SELECT 1 FROM l0_user_slots o WHERE o.slot != s.slot) "
    "FROM l0_user_slots s WHERE s.user_id = :u"
)
# Phrase bits per SQL integer: two of them hold the at most 64 phrases of a
# query (MAX_TERMS terms plus as many roots).
_WORD = 32
_SHIFTS = np.arange(_WORD, dtype=np.int64)


def _doc_length(size: bytes) -> int:
    """A row's token count from its FTS5 docsize blob: one SQLite varint per
    column (big-endian groups of 7 bits, high bit set on all but the last)."""
    if max(size, default=0) < 0x80:  # every column under 128 tokens: one byte each
        return sum(size)
    total = value = 0
    for byte in size:
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            total += value
            value = 0
    return total


def idf(docs: int, hits: int) -> float:
    """FTS5's inverse document frequency (never below 1e-6)."""
    value = math.log((docs - hits + 0.5) / (hits + 0.5))
    return value if value > 0.0 else _IDF_FLOOR


def keyword_messages(
    conn: Connection,
    query: str,
    user_id: str,
    k: int,
    *,
    session_id: str | None = None,
    sole_user_shortcut: bool = True,
    hot: HotPostings | None = None,
) -> list[tuple[int, float]]:
    """``(l0_messages id, -score)`` of ``user_id``'s best ``k`` matches for
    ``query``, best first (negative like ``bm25()``: lower is better).
    ``sole_user_shortcut=False`` computes the per-user ranking even when
    ``bm25()`` would give the same (the tests compare the two). ``hot``: the
    in-memory postings of large users (memstore.search.postings), which rank
    a large user's messages without SQL, with the same figures."""
    phrases = query_phrases(query)
    if not phrases:
        return []
    # Plain SQL with named parameters through driver_rows (the DB-API
    # connection): compiling a text() clause per query cost more than these
    # statements, and SQLAlchemy's result set-up alone cost ~0.1 ms per
    # statement, a twentieth of the search.
    got = driver_rows(conn, _STATS_AND_OTHERS, {"u": user_id})
    # Messages whose keyword rows the indexer has yet to write (a moment
    # after their capture): scored from their text (memstore.search.tail).
    late = waiting(conn, user_id)
    tail = tail_of(late, phrases, session_id) if late else None
    if not got:
        return rank(phrases, [], 0, 0, k, tail) if tail is not None else []
    stats = got[0]
    lo = int(stats[0]) << SLOT_SHIFT
    if hot is not None and all(len(p.tokens) == 1 for p in phrases):
        # Phrases of several tokens need positions, which the copy lacks.
        raw = conn.connection.driver_connection
        copy = hot.current(raw, user_id, int(stats[0]), int(stats[1]), int(stats[2]))
        if copy is not None:
            return rank_copy(copy, phrases, k, session_id, tail)
    params: dict[str, Any] = {"lo": lo, "hi": lo + (1 << SLOT_SHIFT) - 1, "u": user_id}
    if sole_user_shortcut and not stats[3] and tail is None:
        # The only user: the table's statistics are the user's, and FTS5's
        # bm25() computes the same ranking in C, faster than the per-term
        # statements below when most messages match (tested to agree).
        return _sole_user(conn, query, params, k, session_id)
    # Lengths are FTS5's own (its docsize rows, one contiguous range per user
    # like the index); the message rows are read only when a filter or a
    # term counted from the text needs them. Statistics come from all the
    # user's matches; filters only decide which are returned (as bm25()'s did).
    filters = row_filters("l0", params, session_id=session_id)
    need_text = any(p.counted for p in phrases)
    join = (
        "JOIN l0_messages m ON m.id = g.r - :lo AND m.user_id = :u " if filters or need_text else ""
    )
    sql = (
        f"{tagged_matches('l0_fts', phrases, params)} "
        f"SELECT g.r - :lo, g.a, g.b, d.sz, x.repeats, {'(1' + filters + ')' if filters else '1'}, "
        f"{'m.text' if need_text else 'NULL'} FROM g JOIN l0_fts_docsize d ON d.id = g.r "
        f"LEFT JOIN l0_term_repeats x ON x.key = g.r {join}"
    )
    rows = driver_rows(conn, sql, params)
    if not rows and tail is None:
        return []
    return rank(phrases, rows, int(stats[1]), int(stats[2]), k, tail)


def tagged_matches(table: str, phrases: Sequence[Phrase], params: dict[str, Any]) -> str:
    """The ``WITH`` clause of a per-user ranking: ``g(r, a, b)``, one row per
    FTS row ``r`` in ``params``' rowid range (``:lo``..``:hi``) that matches a
    phrase, with the phrases it matches as bits of ``a`` and ``b`` (two
    32-bit words, the layout ``rank`` reads). One MATCH per phrase, summed
    per row by SQLite, so the docsize and repeats look-ups run once per row,
    not per (phrase, row) pair. Adds the phrases to ``params``."""
    hits = []
    for i, phrase in enumerate(phrases):
        params[f"e{i}"] = phrase.expr
        lo_bit, hi_bit = (1 << i, 0) if i < _WORD else (0, 1 << (i - _WORD))
        hits.append(
            f"SELECT {lo_bit} AS a, {hi_bit} AS b, rowid AS r FROM {table} "
            f"WHERE {table} MATCH :e{i} AND rowid BETWEEN :lo AND :hi"
        )
    return (
        f"WITH h(a, b, r) AS ({' UNION ALL '.join(hits)}), "
        "g(r, a, b) AS (SELECT r, sum(a), sum(b) FROM h GROUP BY r)"
    )


def _sole_user(
    conn: Connection, query: str, params: dict[str, Any], k: int, session_id: str | None
) -> list[tuple[int, float]]:
    match = build_match(query)
    if match is None:
        return []
    params.update(q=match)
    filters = row_filters("l0", params, session_id=session_id)
    join = f"JOIN l0_messages m ON m.id = f.rowid - :lo AND m.user_id = :u{filters} "
    sql = (
        "SELECT f.rowid - :lo AS id, bm25(l0_fts, 1.0, 1.0, 1.0) AS s FROM l0_fts f "
        f"{join if filters else ''}WHERE l0_fts MATCH :q AND f.rowid BETWEEN :lo AND :hi "
        f"ORDER BY s, f.rowid {limit(k)}"
    )
    return [(int(i), float(s)) for i, s in driver_rows(conn, sql, params)]


def _lengths(sizes: Sequence[bytes]) -> Any:
    """Token counts of FTS5 docsize blobs, as a float array."""
    joined = b"".join(sizes)
    if len(joined) == len(COLUMN_NAMES) * len(sizes):
        # Every column of every message under 128 tokens: one byte each.
        per_column = np.frombuffer(joined, dtype=np.uint8).reshape(len(sizes), -1)
        return per_column.sum(axis=1).astype(np.float64)
    return np.array([_doc_length(s) for s in sizes], dtype=np.float64)


@functools.lru_cache(maxsize=256)
def _repeats_pattern(keys: tuple[str, ...]) -> re.Pattern[str]:
    """Finds ``<column><token>:<count>`` for ``keys`` in repeats joined by
    newlines (the format of memstore.text.terms.document_stats: parts
    separated by spaces; a token holds neither a space nor a colon)."""
    alternatives = "|".join(re.escape(key) for key in keys)
    return re.compile(f"(?:^| )({alternatives}):([0-9]+)", re.MULTILINE)


def _stored_counts(
    keys: dict[tuple[int, str], list[int]], repeats: Sequence[str | None], has: Any, tf: Any
) -> None:
    """Set ``tf[d, i]`` to message ``d``'s stored count of phrase ``i`` for
    the phrases in ``keys``. One regular expression over all the matched
    messages' repeats joined, rather than parsing each message's whole list
    in Python (that parse was a third of a keyword search)."""
    rows = [d for d, r in enumerate(repeats) if r]
    if not rows:
        return
    texts = [r for r in repeats if r]
    joined = "\n".join(texts)
    found = [
        (m.start(1), m.group(1), m.group(2))
        for m in _repeats_pattern(tuple(f"{c}{t}" for c, t in keys)).finditer(joined)
    ]
    if not found:
        return
    # Each match's message: the joined strings' start offsets, searched.
    starts: Any = np.cumsum([0] + [len(t) + 1 for t in texts[:-1]])
    owners = np.asarray(rows)[np.searchsorted(starts, [f[0] for f in found], side="right") - 1]
    for d, (_, key, count) in zip(owners.tolist(), found, strict=True):
        for i in keys[(int(key[0]), key[1:])]:
            if has[d, i]:
                tf[d, i] = int(count)


def rank(
    phrases: list[Phrase],
    rows: Sequence[Any],
    user_docs: int,
    user_tokens: int,
    k: int,
    tail: Tail | None = None,
) -> list[tuple[int, float]]:
    """BM25 over ``rows`` = ``(message id, phrase bits 0-31, phrase bits
    32-63, docsize, repeats, kept, text)``, one per matched message, and the
    user's messages waiting for their keyword rows (``tail``), which count in
    the statistics too."""
    n_phrases = len(phrases)
    if rows:
        mids, has, tf, length, kept = _matched(phrases, rows)
    else:
        mids = np.zeros(0, dtype=np.int64)
        has = np.zeros((0, n_phrases), dtype=np.int64)
        tf, length, kept = np.zeros((0, n_phrases)), np.zeros(0), np.zeros(0, dtype=bool)
    if tail is not None and tail.docs:
        mids = np.concatenate([mids, tail.ids])
        has = np.concatenate([has, tail.has])
        tf = np.concatenate([tf, tail.tf])
        length = np.concatenate([length, tail.lengths])
        kept = np.concatenate([kept, tail.kept])
        user_docs += tail.docs
        user_tokens += tail.tokens
    n = len(mids)
    if n == 0:
        return []
    n_docs = max(user_docs, n)
    avgdl = (user_tokens / n_docs) or 1.0
    weights = [idf(n_docs, c) for c in has.sum(axis=0).tolist()]
    norm = K1 * (1 - B + B * length / avgdl)
    # Each message's terms summed in phrase order, the order FTS5 adds them
    # (so a one-user store gets bm25()'s figures to the last bit); a phrase
    # a message lacks adds exactly 0. Column by column of a transposed
    # copy: contiguous rows, one temporary per step.
    scores = np.zeros(n)
    for w, f in zip(weights, tf.T.copy(), strict=True):
        scores += w * ((f * _K1_PLUS_1) / (f + norm))
    # A waiting message that matches no phrase only counts in the statistics.
    shown = kept & has.any(axis=1)
    order = np.lexsort((mids, -scores))
    if not shown.all():
        order = order[shown[order]]
    best = order[:k].tolist()
    return [(int(mids[i]), -float(scores[i])) for i in best]


def _matched(phrases: list[Phrase], rows: Sequence[Any]) -> tuple[Any, Any, Any, Any, Any]:
    """``(ids, has, tf, lengths, kept)`` of :func:`rank`'s ``rows``."""
    mids_, low, high, sizes, repeats, kept_, bodies = zip(*rows, strict=True)
    n_phrases = len(phrases)
    has = (np.array(low, dtype=np.int64)[:, None] >> _SHIFTS[: min(n_phrases, _WORD)]) & 1
    if n_phrases > _WORD:
        more = (np.array(high, dtype=np.int64)[:, None] >> _SHIFTS[: n_phrases - _WORD]) & 1
        has = np.concatenate([has, more], axis=1)
    # Term frequency is 1 unless the message's stored repeats say more, or
    # (terms without stored repeats) its text does.
    tf = has.astype(np.float64)
    counted: list[int] = []
    keys: dict[tuple[int, str], list[int]] = {}
    for i, p in enumerate(phrases):
        if p.counted:
            counted.append(i)
        else:
            keys.setdefault((p.column, p.tokens[0]), []).append(i)
    if keys:
        _stored_counts(keys, repeats, has, tf)
    if counted:
        # Only the counted phrases a message holds, only in the columns they
        # search: a function word matches most messages, and tokenising each
        # whole message cost ~40 us (36 ms for "the" at 1k messages).
        flags = has[:, counted].tolist()
        for d, body in enumerate(bodies):
            if body is None:
                continue
            which = [i for i, f in zip(counted, flags[d], strict=True) if f]
            if which:
                for i, c in zip(which, text_counts(phrases, body, which), strict=True):
                    tf[d, i] = max(c, 1)
    return (
        np.array(mids_, dtype=np.int64),
        has,
        tf,
        _lengths(sizes),
        np.array(kept_, dtype=bool),
    )


def rank_copy(
    copy: Copy,
    phrases: list[Phrase],
    k: int,
    session_id: str | None = None,
    tail: Tail | None = None,
) -> list[tuple[int, float]]:
    """:func:`rank`'s ranking over a user's in-memory postings: the user's
    statistics, every phrase's weight times its saturated frequency, summed
    per message in phrase order (adding nothing where a message lacks the
    phrase, as rank adds exactly 0), best ``k`` by score then id. ``tail``:
    the user's messages after the copy's, waiting for their keyword rows."""
    if tail is not None and not tail.docs:
        tail = None
    docs_total = copy.docs + (tail.docs if tail is not None else 0)
    if tail is None:
        norm = copy.derived.get("norm")
        if norm is None:
            avgdl = (copy.tokens / copy.docs) or 1.0
            norm = copy.derived["norm"] = K1 * (1 - B + B * copy.lengths / avgdl)
    else:
        # The waiting messages change the average length: not cached.
        avgdl = ((copy.tokens + tail.tokens) / docs_total) or 1.0
        norm = K1 * (1 - B + B * copy.lengths / avgdl)
        tail_norm = K1 * (1 - B + B * tail.lengths / avgdl)
        tail_scores = np.zeros(tail.docs)
    scores = np.zeros(len(copy.ids))
    for i, p in enumerate(phrases):
        docs, f = copy.postings(p.column, p.tokens[0], p.prefix)
        hits = len(docs) + (int(tail.has[:, i].sum()) if tail is not None else 0)
        if not hits:
            continue
        w = idf(docs_total, hits)
        if len(docs):
            scores[docs] += w * ((f * (K1 + 1.0)) / (f + norm[docs]))
        if tail is not None:
            t = tail.tf[:, i]
            tail_scores += w * ((t * (K1 + 1.0)) / (t + tail_norm))
    matched = scores > 0.0
    if session_id is not None:
        code = copy.session_codes.get(session_id)
        if code is None:
            matched[:] = False
        else:
            matched &= copy.sessions == code
    found = np.flatnonzero(matched)
    if len(found) > k > 0:
        # Everything scoring at least the k-th best (ties at the edge go by id).
        edge = -np.partition(-scores[found], k - 1)[k - 1]
        found = found[scores[found] >= edge]
    if tail is None:
        # Message indexes ascend with ids, so the index breaks ties as the id does.
        best = found[np.lexsort((found, -scores[found]))][:k]
        return [(int(copy.ids[i]), -float(scores[i])) for i in best]
    shown = tail.kept & tail.has.any(axis=1)
    ids = np.concatenate([copy.ids[found], tail.ids[shown]])
    got = np.concatenate([scores[found], tail_scores[shown]])
    order = np.lexsort((ids, -got))[:k]
    return [(int(ids[i]), -float(got[i])) for i in order]
