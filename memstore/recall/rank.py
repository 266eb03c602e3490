"""Recall's candidates on one relevance scale, and the gate.

Candidates are the user's L1 memories and L0 messages that the hybrid
search returns for the query. Their fused search scores cannot be gated:
they are rank-based and normalised, so the best hit of any query, however
unrelated, scores 1.0. Relevance is therefore measured per candidate from an absolute signal, the
same for both layers:

- with vectors: the cosine between the query and the candidate in the
  embedder's space, made query-relative by subtracting the query's mean
  similarity to a fixed set of everyday "null" sentences (an embedder puts
  some queries close to everything; the null set measures how close), in
  units of ``SIM_SCALE``;
- without a vector (keyword strategy, no embedder, vectors still being
  built, or a lexical embedder such as feature hashing): how many of the
  query's content words (stop words dropped, inflections matched by a
  shared prefix) the candidate contains, over the square root of their
  number, times ``COVERAGE_WEIGHT``.

The gate keeps candidates with ``relevance >= recall_threshold``, so it
means the same for every strategy. In the vector case the word coverage,
weighted ``AGREE_WEIGHT``, is added to the margin: agreeing keyword
evidence lifts a middling margin, while coverage alone (a two-word question
such as "why is the sky blue?" fully covered by an unrelated chat line)
does not reach the gate. Before any candidate counts, the query itself is
checked (``off_topic``): small talk and questions naming what the memory
does not hold inject nothing. The weight and the default threshold were
chosen by cross-validation on the LoCoMo development conversations against
a list of off-topic questions (``memstore.bench.locomo_views``; the
procedure and the figures are in BENCHMARKS.md and docs/recall.md).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection, text

from memstore.db import backend
from memstore.db.sqlfn import driver_rows, driver_sql, in_list
from memstore.derive.messages.columns import labelled_text
from memstore.derive.queries import forgotten_sources, forgotten_sources_ahead, memories_by_id
from memstore.embeddings import from_blob
from memstore.errors import MemstoreError
from memstore.recall import expand
from memstore.recall.nulls import (
    LEXICAL_EMBEDDERS,
    NULL_SENTENCES,
    NULL_SENTENCES_CJK,
    null_vectors,
)
from memstore.recall.query import about_someone, dated, personal, query_dates
from memstore.recall.text import WORD_RE, term_matches
from memstore.text import fold_diacritics, query_terms
from memstore.text.cjk import has_cjk
from memstore.vectors import spaces

log = logging.getLogger("memstore.recall")

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext
    from memstore.search import Hit

MEMORY_CANDIDATES = 10  # searched; at most ``recall_limit`` are injected
MESSAGE_CANDIDATES = 20
SIM_SCALE = 0.1  # a margin of 0.1 over the null mean counts as relevance 1.0
# Coverage of 0.72 (see ``coverage``) maps to the default threshold: the
# calibrated point for keyword-only relevance.
COVERAGE_WEIGHT = 1.1 / 0.72
# Added to the relevance of an item dated in a month or year the question
# names ("What did Mel paint in July 2023?"); see query_dates.
DATE_BOOST = 0.3
AGREE_WEIGHT = 0.5  # chosen with the threshold by cross-validation (BENCHMARKS.md)
# A small store: at most this many of the user's messages and memories
# together (a few dozen facts, each a message and a memory).
SMALL_STORE_ITEMS = 100
# Added to the relevance of every candidate of a personal question (see
# query.personal) on a small store: e5's margins between a question and the
# few facts such a store holds are small (the question is "like" all of
# them), while the store is the only place the answer can be and its items
# are few and short. Only candidates within ``LIFT_WITHIN`` of the query's
# best are lifted: when one fact clearly answers ("what tea do I like?" and
# "I like green tea"), the rest of the store stays out. Both chosen on the
# small-store corpus' calibration stores (BENCHMARKS.md, "Recall on small
# stores").
PERSONAL_LIFT = 0.8
LIFT_WITHIN = 0.4
# Subtracted from the relevance of every candidate of a question about no
# one (see query.about_someone): a task or a fact of the world ("Explain how
# a hash map works.", "Why is the sky blue?") is answered from memory only
# on strong evidence; a middling margin to a chat line about something alike
# is chance. Measured on LoCoMo dev (BENCHMARKS.md, "Recall by view").
IMPERSONAL_PENALTY = 0.3


@dataclass
class Candidate:
    kind: str  # "memory" or "message"
    rowid: int
    ref: str  # memory_id or message_id
    text: str
    search_score: float
    similarity: float | None = None
    floor: float | None = None  # the query's mean similarity to the null sentences
    coverage: float = 0.0
    relevance: float = 0.0  # a memory's is lifted to its sources' (see collect)
    own: float = 0.0  # before lifting
    standing: bool = False  # a standing instruction: in the stable part already
    row: dict[str, Any] = field(default_factory=dict)
    sources: list[Candidate] = field(default_factory=list)  # a memory's source messages
    dated: float = 0.0  # added to the relevance: the item's date is one the query names
    # added to the relevance: a personal question on a small store (score_candidates),
    # who and when the query points at (recall.expand)
    lift: float = 0.0


def matched_words(query_words: list[str], text_: str) -> int:
    """How many of ``query_words`` (case-folded) occur in ``text_``, both
    without Latin diacritics as keyword search compares them."""
    if not query_words:
        return 0
    words = {w.casefold() for w in WORD_RE.findall(fold_diacritics(text_))}
    # term_matches needs the same first four letters unless the words are
    # equal: only those words are compared (recall scores ~30 texts a query).
    heads: dict[str, list[str]] = {}
    for w in words:
        if len(w) >= 4:
            heads.setdefault(w[:4], []).append(w)
    return sum(
        1
        for t in map(fold_diacritics, query_words)
        if t in words or any(term_matches(t, w) for w in heads.get(t[:4], ()))
    )


def coverage(latin: list[str], grams: list[str], text_: str, given: int = 0) -> float:
    """Matched content words over the square root of their number: a one-word
    query needs its word, up to seven words need two, longer ones three (at
    the default gate); measured on LoCoMo dev, this let through more evidence
    than the plain share at the same off-topic rate (67% vs 64% at 10%).
    ``given``: words of ``latin`` that match without being in the text."""
    n = len(latin) + len(grams)
    if not n:
        return 0.0
    found = matched_words(latin, text_) + sum(1 for g in grams if g in text_)
    return min(found + given, n) / math.sqrt(n)


def gate_margin(similarity: float, floor: float) -> float:
    """How much closer the query is to the item than to everyday talk.

    The item's own closeness to everyday talk is not subtracted: measured on
    LoCoMo dev (conv-26, clean), subtracting it (CSLS-style, or only when it
    exceeds the query's) cost 8-38 points of evidence at the same off-topic
    rate; generic replies are kept out by the search instead."""
    return similarity - floor


def relevance(margin: float | None, cov: float, agree: float | None = None) -> float:
    """The gate's scale. With vectors, the margin plus ``agree`` times the
    word coverage: keyword evidence agreeing with a middling vector margin
    ("what tea do I like?" and "I like green tea"), chosen with the
    threshold by cross-validation on LoCoMo (BENCHMARKS.md)."""
    if margin is None:
        return cov * COVERAGE_WEIGHT
    return margin / SIM_SCALE + (AGREE_WEIGHT if agree is None else agree) * cov


def rescore(cands: list[Candidate], agree: float) -> list[Candidate]:
    """``cands`` on the gate's scale with another ``agree`` weight, ranked
    again (the benchmark's sweep)."""
    for c in cands:
        for x in (c, *c.sources):
            margin = (
                x.similarity - x.floor if x.similarity is not None and x.floor is not None else None
            )
            x.relevance = relevance(margin, x.coverage, agree) + x.dated + x.lift
    return rank(cands)


# -- similarities -----------------------------------------------------------------


def query_vector(store: DeriveContext, query: str) -> np.ndarray[Any, Any] | None:
    """The query's vector, from the engine's per-query cache (the search just
    embedded it), or None without an embedder whose similarity means relevance."""
    emb = store.embedder
    if emb is None or emb.model_id.startswith(LEXICAL_EMBEDDERS):
        return None
    try:
        blob = store.search_engine.query_blob(query)
    except MemstoreError:
        return None
    return from_blob(blob, emb.dimensions)


def _vectors(
    conn: Connection,
    store: DeriveContext,
    kind: str,
    user_id: str,
    rowids: list[int],
    sp: spaces.Space | bool | None = False,
) -> dict[int, np.ndarray[Any, Any]]:
    """The stored vectors of ``rowids`` (``user_id``'s); ``sp``: the space the
    search used (False: look it up)."""
    emb = store.embedder
    if emb is None or not rowids:
        return {}
    if sp is False:
        model = spaces.space_model_id(kind, emb.model_id, store.settings.embedding.context_vectors)
        sp = spaces.get_space(conn, kind, model)
    if not isinstance(sp, spaces.Space) or not sp.ready:
        return {}
    # The search that found them has just brought the user's in-memory copy
    # up to this snapshot: the same bytes as the store's, without a vec0
    # look-up per candidate (30 of a recall's ~90 statements at 100k + 10k).
    cached = store.search_engine.hot.stored(sp, user_id, rowids)
    rest = [i for i in rowids if i not in cached]
    return cached | _stored_vectors(conn, sp, rest) if rest else cached


def _stored_vectors(
    conn: Connection, sp: spaces.Space, rowids: list[int]
) -> dict[int, np.ndarray[Any, Any]]:
    got = backend.of(conn).vectors_by_id(conn, sp.table_name, rowids, sp.element)
    return {i: from_blob(b, sp.dims) for i, b in got.items()}


def score_candidates(
    store: DeriveContext,
    query: str,
    user_id: str,
    cands: list[Candidate],
    conn: Connection | None = None,
    found_spaces: dict[str, spaces.Space | None] | None = None,
    lift: float = 0.0,
) -> None:
    """Fill ``similarity``, ``coverage`` and ``relevance`` of every candidate
    (``conn``: the caller's read transaction, else one of its own;
    ``found_spaces``: the vector spaces the searches used, by layer;
    ``lift``: added to the relevance of those near the best, see
    ``PERSONAL_LIFT``; a negative one to every relevance, see
    ``IMPERSONAL_PENALTY``)."""
    known = found_spaces or {}
    dates = query_dates(query)
    latin_terms, cjk_terms = query_terms(query)
    latin = [t.casefold() for t in latin_terms]
    grams = [g.rstrip("*") for g in cjk_terms]
    emb = store.embedder
    vecs: dict[tuple[str, int], np.ndarray[Any, Any]] = {}
    if emb is not None and not emb.model_id.startswith(LEXICAL_EMBEDDERS):
        with store.search_engine.reading(conn) as reader:
            for kind, layer in (("memory", "l1"), ("message", "l0")):
                ids = [x.rowid for x in cands if x.kind == kind]
                got = _vectors(reader, store, layer, user_id, ids, known.get(layer, False))
                vecs.update(((kind, i), v) for i, v in got.items())
    # Only with vectors to compare: the query's own (cached by the search)
    # and the null sentences' (cached in the database).
    qv = query_vector(store, query) if vecs else None
    floor: float | None = None
    if qv is not None and emb is not None:
        nulls = NULL_SENTENCES_CJK if has_cjk(query) else NULL_SENTENCES
        floor = float((null_vectors(store, emb, nulls) @ qv).mean())
    for c in cands:
        v = vecs.get((c.kind, c.rowid))
        c.similarity = float(v @ qv) if v is not None and qv is not None else None
        margin = None
        if c.similarity is not None and floor is not None:
            c.floor = floor
            margin = gate_margin(c.similarity, floor)
        # Every memory is about the user, in the deriver's words ("the user"):
        # a query word naming the user by id ("where does alice live?") matches.
        given = sum(1 for t in latin if t == user_id.casefold()) if c.kind == "memory" else 0
        # A message is matched with its speaker's name, as search indexes it.
        said = labelled_text(c.row.get("speaker"), c.text) if c.kind == "message" else c.text
        c.coverage = coverage(latin, grams, said, given)
        c.dated = DATE_BOOST if dates and dated(c.row, dates) else 0.0
        c.relevance = relevance(margin, c.coverage) + c.dated
    if lift and cands:
        best = max(c.relevance for c in cands) if lift > 0 else math.inf
        for c in cands:
            if c.relevance >= best - LIFT_WITHIN or lift < 0:
                c.lift = lift
                c.relevance += lift


def collect(
    store: DeriveContext,
    query: str,
    user_id: str,
    session_id: str | None,
    skip: set[str],
    speaker: str | None = None,
) -> list[Candidate]:
    """Memories and messages for ``query``, scored, best first. Memories in
    ``skip`` (the stable part's) come back marked ``standing``: not to be
    injected again, only to tell which messages they explain. Messages of
    ``session_id`` are left out: the host has the current session in its
    context already.

    Both searches, the rows and the vectors are read in one snapshot (one
    read transaction instead of one per step); the query is embedded once
    and shared by both searches and the gate (the engine's query cache)."""
    with store.db.read() as conn:
        # PostgreSQL: asked after the searches, sent with their first read.
        forgotten_sources_ahead(conn, user_id)
        used: dict[str, spaces.Space | None] = {}
        mem_hits, msg_hits = store.search_both(
            conn,
            query,
            user_id=user_id,
            memories=MEMORY_CANDIDATES,
            messages=MESSAGE_CANDIDATES,
            found_spaces=used,
            speaker=speaker,
        )
        cands = from_hits("memory", mem_hits)
        for c in cands:
            c.standing = c.ref in skip
        cands += from_hits("message", msg_hits)
        rows = memories_by_id(conn, user_id, [c.ref for c in cands if c.kind == "memory"])
        msg_rows = message_rows(conn, [c.rowid for c in cands if c.kind == "message"])
        for c in cands:
            c.row = rows.get(c.ref, {}) if c.kind == "memory" else msg_rows.get(c.rowid, {})
        # A forgotten memory's source messages hold the forgotten fact.
        hidden = forgotten_sources(conn, user_id)
        cands = [c for c in cands if c.row and not (c.kind == "message" and c.ref in hidden)]
        # A memory stands for the messages it came from (and words of a
        # memory are the deriver's, not the user's: "love" became "likes"),
        # so its sources are scored too, found or not.
        have = {c.ref for c in cands if c.kind == "message"}
        wanted = (
            {
                str(src)
                for c in cands
                if c.kind == "memory" and not c.standing
                for src in c.row.get("source_message_ids") or ()
            }
            - have
            - hidden
        )
        sources = [
            Candidate("message", int(r["id"]), str(r["message_id"]), str(r["text"]), 0.0, row=r)
            for r in source_rows(conn, user_id, sorted(wanted))
        ]
        if not about_someone(query, cands):
            lift = -IMPERSONAL_PENALTY
        elif personal(query) and small_store(conn, user_id):
            lift = PERSONAL_LIFT
        else:
            lift = 0.0
        score_candidates(store, query, user_id, cands + sources, conn, used, lift)
        expand.lift(query, cands + sources)
    # ... so it ranks at least as high as they do, is spent first, and they
    # are not repeated.
    by_ref = {c.ref: c for c in cands + sources if c.kind == "message"}
    for c in cands:
        if c.kind == "memory" and not c.standing:
            srcs = c.row.get("source_message_ids") or []
            c.sources = [by_ref[str(s)] for s in srcs if str(s) in by_ref]
    cands = [c for c in cands if c.kind == "memory" or c.row["session_id"] != session_id]
    if speaker:
        want = speaker.casefold()
        cands = [
            c
            for c in cands
            if c.kind == "message"
            or any(str(s.row.get("speaker") or "").casefold() == want for s in c.sources)
        ]
    return rank(cands)


def small_store(conn: Connection, user_id: str) -> bool:
    """The user has at most ``SMALL_STORE_ITEMS`` messages and active
    memories together (each count stops past the limit)."""
    n = 0
    for table, cond in (
        ("l0_messages", ""),
        ("l1_memories", " AND status = 'active'"),
    ):
        sql = (
            f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE user_id = :u{cond} "
            f"LIMIT {SMALL_STORE_ITEMS + 1}) AS t"
        )
        n += int(conn.execute(text(sql), {"u": user_id}).scalar_one())
    return n <= SMALL_STORE_ITEMS


def rank(cands: list[Candidate]) -> list[Candidate]:
    """Best first: a memory is lifted to its most relevant source message."""
    for c in cands:
        c.own = c.relevance
    for c in cands:
        if c.sources:
            c.relevance = max(c.own, *(s.relevance for s in c.sources))
    return sorted(cands, key=lambda c: (-c.relevance, c.kind != "memory", -c.search_score))


MSG_COLS = "id, message_id, session_id, occurred_at, role, speaker, text, position, user_id"
_MSG_NAMES = tuple(MSG_COLS.split(", "))


def message_rows(conn: Connection, rowids: list[int]) -> dict[int, dict[str, Any]]:
    if not rowids:
        return {}
    marks, ids = in_list([int(i) for i in rowids])
    # Driver-level: a text() clause is compiled by SQLAlchemy on each call.
    sql = f"SELECT {MSG_COLS} FROM l0_messages WHERE id IN ({marks})"
    rows = driver_rows(conn, driver_sql(conn, sql), ids)
    return {int(r[0]): dict(zip(_MSG_NAMES, r, strict=True)) for r in rows}


def source_rows(conn: Connection, user_id: str, message_ids: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(0, len(message_ids), 500):
        params = {f"m{j}": m for j, m in enumerate(message_ids[i : i + 500])}
        marks = ",".join(f":{k}" for k in params)
        out += [
            dict(r._mapping)
            for r in conn.execute(
                text(
                    f"SELECT {MSG_COLS} FROM l0_messages "
                    f"WHERE user_id = :u AND message_id IN ({marks})"
                ),
                {"u": user_id, **params},
            )
        ]
    return out


def neighbours(conn: Connection, wanted: dict[int, bool]) -> dict[int, dict[str, Any] | None]:
    """For each message row id in ``wanted``, the previous (``True``) or next
    (``False``) message of the same session that has content, in one query:
    in chat an assistant's "Noted." often sits between a question and its
    answer, and explains nothing."""
    if not wanted:
        return {}
    marks, ids = in_list([int(i) for i in wanted])
    # Messages of one capture call share their event's position; row ids
    # follow log order, so (position, id) orders every turn of a session.
    adjacent = (
        "(SELECT n.id FROM l0_messages n WHERE n.user_id = m.user_id AND "
        "n.session_id = m.session_id AND n.position {op}= m.position AND n.id {op} m.id "
        "AND n.low_info = 0 ORDER BY n.position {order}, n.id {order} LIMIT 1)"
    )
    sql = (
        f"SELECT m.id, {adjacent.format(op='<', order='DESC')}, "
        f"{adjacent.format(op='>', order='ASC')} FROM l0_messages m WHERE m.id IN ({marks})"
    )
    pairs = driver_rows(conn, driver_sql(conn, sql), ids)
    picked = {
        int(r[0]): (int(r[1]) if r[1] is not None else None)
        if wanted[int(r[0])]
        else (int(r[2]) if r[2] is not None else None)
        for r in pairs
    }
    rows = message_rows(conn, [i for i in picked.values() if i is not None])
    return {i: (rows.get(n) if n is not None else None) for i, n in picked.items()}


def from_hits(kind: str, hits: list[Hit]) -> list[Candidate]:
    return [
        Candidate(kind=kind, rowid=h.id, ref=h.ref, text=h.text, search_score=float(h.score))
        for h in hits
    ]
