"""Keyword search on PostgreSQL: the FTS5 query of the SQLite side, in tsquery.

The full-text tables have the same columns on both engines (created by
the migrations): ``text`` (words, CJK runs blanked), ``cjk`` (overlapping CJK bigrams) and
``stem`` (English word roots), and on PostgreSQL a generated ``tsv`` with
weights A/B/C over them and a GIN index. The terms come from the same
:func:`memstore.text.fts.query_terms` and :func:`memstore.text.stem.word_roots`
as on SQLite, so CJK bigrams and roots are treated alike. The ``text`` column
and the terms are written without Latin diacritics
(:func:`memstore.text.fold.fold_diacritics`), since the ``simple``
configuration keeps them: "creme" finds "crème" as FTS5 finds it.

User text is never query syntax: every term is a bind parameter turned into a
tsquery by ``plainto_tsquery`` (which knows no operators), and the terms are
OR-ed with tsquery's ``||`` in SQL — no user character reaches ``to_tsquery``.
A lone CJK character is a prefix query (it is indexed only as the first half
of bigrams), built from a string that holds CJK characters only.

Scores are ``-ts_rank_cd`` so that, as with FTS5's ``bm25()``, lower is better.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Connection

from memstore.db import rawexec
from memstore.derive.messages.keywords import SLOT_SHIFT
from memstore.search.filters import row_filters
from memstore.text.cjk import CJK_CHAR_CLASS
from memstore.text.fold import fold_diacritics
from memstore.text.fts import query_terms
from memstore.text.stem import word_roots

_CJK_ONLY = re.compile(f"[{CJK_CHAR_CLASS}]+")


def tsquery_sql(query: str, params: dict[str, Any]) -> str | None:
    """A SQL expression of type tsquery for ``query`` (terms added to ``params``),
    or None when nothing in it is searchable."""
    latin_terms, cjk = query_terms(query)
    latin = [fold_diacritics(t) for t in latin_terms]
    parts: list[str] = []
    # A root that is the word itself once: the server ranks each distinct
    # term once anyway, and would parse and match it twice.
    terms = list(dict.fromkeys([*latin, *word_roots(latin)])) if latin else []
    for i, term in enumerate(terms):
        params[f"kw{i}"] = term
        parts.append(f"plainto_tsquery('simple', :kw{i})")
    for i, gram in enumerate(cjk):
        if gram.endswith("*"):
            char = gram[:-1]
            if not _CJK_ONLY.fullmatch(char):
                continue
            params[f"cj{i}"] = char + ":*"
            parts.append(f"to_tsquery('simple', :cj{i})")
        else:
            params[f"cj{i}"] = gram
            parts.append(f"plainto_tsquery('simple', :cj{i})")
    if not parts:
        return None
    return "(" + " || ".join(parts) + ")"


_SLOT = "SELECT slot FROM {slots} WHERE user_id = ?"


def read_ahead(conn: Connection, kind: str, user_id: str) -> None:
    """A keyword search of ``user_id``'s ``kind`` follows in this
    transaction: its first read (the user's slot) goes with the next round
    trip instead of one of its own."""
    slots = "l0_user_slots" if kind == "l0" else "l1_user_slots"
    rawexec.prefetch(conn, _SLOT.format(slots=slots), (user_id,), reads=(slots,))


def keyword(
    conn: Connection,
    kind: str,
    query: str,
    user_id: str,
    k: int,
    *,
    l1_filter: str,
    session_id: str | None = None,
    type_: str | None = None,
    scene: str | None = None,
) -> list[tuple[int, float]]:
    """``(row id, score)`` best first, the contract of the FTS5 search.
    ``l1_filter`` is the caller's SQL condition on memories ``m`` (which
    generation and status count); it is code, never user input."""
    params: dict[str, Any] = {"u": user_id, "k": k}
    q = tsquery_sql(query, params)
    if q is None:
        return []
    table, source, slots = (
        ("l0_fts", "l0_messages", "l0_user_slots")
        if kind == "l0"
        else ("l1_fts", "l1_memories", "l1_user_slots")
    )
    # Both tables' rowids carry the user's slot above the row id
    # (memstore.derive.messages.keywords.fts_key, memstore.derive.memories.fts_index);
    # the low bits are the message or memory id, so the user's rows fill one
    # rowid range. With the range the planner reads only that user's entries
    # of the primary key when the user is small, instead of every user's GIN
    # matches (100 users x 1k messages, quiet: p50 / p95 47 / 107 -> 12 / 21
    # ms, the same lists); a large user still gets the GIN index.
    slot = rawexec.scalar(conn, _SLOT.format(slots=slots), (user_id,))
    if slot is None:
        return []  # nothing indexed for the user
    params["lo"] = int(slot) << SLOT_SHIFT
    params["hi"] = (int(slot) + 1) << SLOT_SHIFT
    where = f" AND {l1_filter}" if kind != "l0" else ""
    where += row_filters(kind, params, session_id=session_id, type_=type_, scene=scene)
    if not where:
        # Every row in the range is one of the user's (the projections
        # write them so, and an erasure rebuilds them), as the SQLite side
        # trusts too: the matches alone answer, with no row read. Reading
        # each match's row only to check its user took two thirds of the
        # statement for a 160-message user (EXPLAIN ANALYZE, 1.6 of 2.4 ms).
        sql = (
            f"SELECT mod(f.rowid, {1 << SLOT_SHIFT}), -ts_rank_cd(f.tsv, q.q) AS s "
            f"FROM (SELECT {q} AS q) q JOIN {table} f ON f.tsv @@ q.q "
            "WHERE f.rowid >= :lo AND f.rowid < :hi ORDER BY s, f.rowid LIMIT :k"
        )
    else:
        # The filters need the row: each match's row is read by its key, in
        # a subquery the planner may neither flatten nor reorder (LATERAL,
        # OFFSET 0), so the plan does not hang on the statistics of the
        # user's rows. With a plain join the planner chose by its estimates:
        # a user who arrived after the last ANALYZE is estimated at one row,
        # and it then read the user's every message once per match (61-236
        # ms a search for a 1k-message user); with the user's condition kept
        # off the index, it overestimated the matches and hashed a scan of
        # every user's messages (24 ms).
        sql = (
            f"SELECT m.id, -ts_rank_cd(f.tsv, q.q) AS s FROM (SELECT {q} AS q) q "
            f"JOIN {table} f ON f.tsv @@ q.q CROSS JOIN LATERAL (SELECT * FROM {source} r "
            f"WHERE r.id = mod(f.rowid, {1 << SLOT_SHIFT}) OFFSET 0) m "
            f"WHERE m.user_id = :u AND f.rowid >= :lo AND f.rowid < :hi{where} "
            "ORDER BY s, m.id LIMIT :k"
        )
    # On the driver (memstore.db.rawexec): SQLAlchemy's text() cost more
    # than the statement on a short query. Never prepared (``replan``): a
    # generic plan cannot fold the tsquery into a constant, so it computed
    # every plainto_tsquery per candidate row (14 ms against 4.5 planned
    # for the values).
    plain, values = _positional(sql, params)
    # Without parallel workers: costed by the matches of every user, the
    # per-match lookups made the planner start a worker for a 1k-message
    # user, and starting it took 8-9 ms of an 11 ms search (auto_explain).
    # Both SETs travel with the search, in its round trip or the next.
    rawexec.run(conn, "SET LOCAL max_parallel_workers_per_gather = 0")
    got = rawexec.rows(conn, plain, values, replan=True)
    rawexec.run(conn, "SET LOCAL max_parallel_workers_per_gather TO DEFAULT")
    return [(int(r[0]), float(r[1])) for r in got]


_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def _positional(sql: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """``:name`` parameters as ``?`` and their values in order. For the SQL
    written in this module and its callers' filters only: no string literal
    or cast in it holds ``:name``."""
    values: list[Any] = []

    def mark(m: re.Match[str]) -> str:
        values.append(params[m.group(1)])
        return "?"

    return _NAMED.sub(mark, sql), values
