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
  built, or a lexical embedder such as feature hashing): the share of the
  query's content words (stop words dropped, inflections matched by a
  shared prefix) found in the candidate, times ``COVERAGE_WEIGHT``.

The gate keeps candidates with ``relevance >= recall_threshold``, so it
means the same for every strategy. Word coverage is not mixed into the
vector case: a two-word question ("why is the sky blue?") fully covered by
an unrelated chat line would pass. The constants and the default threshold
were calibrated on the LoCoMo development conversations against a fixed
list of off-topic questions (``memstore.bench.locomo_recall``; the
procedure and the curve are in BENCHMARKS.md).
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection, select, text
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from memstore.db.schema import embedding_cache
from memstore.derive.recall_text import term_matches
from memstore.embeddings import check_vectors, content_hash, from_blob, to_blob
from memstore.errors import MemstoreError
from memstore.text import query_terms
from memstore.vectors import spaces

log = logging.getLogger("memstore.recall")

if TYPE_CHECKING:
    from memstore.embeddings import Embedder
    from memstore.search import Hit
    from memstore.store import Store

# Everyday sentences no question is about: the similarity floor of a query.
NULL_SENTENCES = (
    "The weather was nice today.",
    "I went to the shop and bought some bread.",
    "Thanks, that sounds great!",
    "We talked for a while and then went home.",
    "It has been a busy week at work.",
    "Let me know what you think.",
    "I watched a movie last night.",
    "See you soon!",
    "My friend called me yesterday.",
    "That is really interesting.",
    "Okay, noted.",
    "I had lunch with my family on Sunday.",
)
SIM_SCALE = 0.1  # a margin of 0.1 over the null mean counts as relevance 1.0
# Embedders whose similarities carry no meaning beyond shared words: the
# feature-hashing one. Measured on LoCoMo dev: its margin let through 39% of
# the evidence at 10% off-topic injection, word coverage 64%.
LEXICAL_EMBEDDERS = ("hashing-",)
# Coverage of 0.4 (two of five content words, one of two) maps to the
# default threshold: the calibrated point for keyword-only relevance.
COVERAGE_WEIGHT = 0.9 / 0.4


@dataclass
class Candidate:
    kind: str  # "memory" or "message"
    rowid: int
    ref: str  # memory_id or message_id
    text: str
    search_score: float
    similarity: float | None = None
    coverage: float = 0.0
    relevance: float = 0.0
    row: dict[str, Any] = field(default_factory=dict)


def coverage(query_words: list[str], text_: str) -> float:
    """Share of ``query_words`` (case-folded) found in ``text_``."""
    if not query_words:
        return 0.0
    from memstore.derive.recall_text import _WORD

    words = {w.casefold() for w in _WORD.findall(text_)}
    found = sum(1 for t in query_words if t in words or any(term_matches(t, w) for w in words))
    return found / len(query_words)


def cjk_coverage(grams: list[str], text_: str) -> float:
    return sum(1 for g in grams if g in text_) / len(grams) if grams else 0.0


def relevance(margin: float | None, cov: float) -> float:
    return margin / SIM_SCALE if margin is not None else cov * COVERAGE_WEIGHT


# -- similarities -----------------------------------------------------------------

_null_cache: weakref.WeakKeyDictionary[Embedder, np.ndarray[Any, Any]] = weakref.WeakKeyDictionary()
_null_lock = threading.Lock()


def null_vectors(store: Store, embedder: Embedder) -> np.ndarray[Any, Any]:
    """The null sentences' vectors: from memory, else from the database's
    embedding cache, else embedded once and written to that cache (so only
    the first recall on a database ever pays for them)."""
    with _null_lock:
        got = _null_cache.get(embedder)
    if got is not None:
        return got
    hashes = [content_hash(t) for t in NULL_SENTENCES]
    model = embedder.model_id
    with store.db.read() as conn:
        rows = dict(
            conn.execute(
                select(embedding_cache.c.content_hash, embedding_cache.c.vector).where(
                    embedding_cache.c.model_id == model,
                    embedding_cache.c.content_hash.in_(hashes),
                )
            ).all()
        )
    if all(h in rows for h in hashes):
        got = np.stack([from_blob(rows[h], embedder.dimensions) for h in hashes])
    else:
        got = check_vectors(
            embedder.embed_documents(list(NULL_SENTENCES)), embedder.dimensions
        ).astype(np.float32)
        try:
            with store.db.write() as conn:
                conn.execute(
                    sqlite_insert(embedding_cache).on_conflict_do_nothing(),
                    [
                        {
                            "model_id": model,
                            "content_hash": h,
                            "dims": embedder.dimensions,
                            "vector": to_blob(v),
                        }
                        for h, v in zip(hashes, got, strict=True)
                    ],
                )
        except MemstoreError as exc:  # a busy or read-only file: embed again next time
            log.info("recall: could not cache the null vectors: %s", exc)
    with _null_lock:
        _null_cache[embedder] = got
    return got


def query_vector(store: Store, query: str) -> np.ndarray[Any, Any] | None:
    """The query's vector, from the engine's per-query cache (the search just
    embedded it), or None without an embedder whose similarity means relevance."""
    emb = store.embedder
    if emb is None or emb.model_id.startswith(LEXICAL_EMBEDDERS):
        return None
    try:
        blob = store.search_engine._query_blob(query)
    except MemstoreError:
        return None
    return from_blob(blob, emb.dimensions)


def _vectors(
    conn: Connection, store: Store, kind: str, rowids: list[int]
) -> dict[int, np.ndarray[Any, Any]]:
    emb = store.embedder
    if emb is None or not rowids:
        return {}
    model = spaces.space_model_id(kind, emb.model_id, store.settings.context_vectors)
    sp = spaces.get_space(conn, kind, model)
    if sp is None or not sp.ready:
        return {}
    ids = ",".join(str(int(i)) for i in rowids)
    rows = conn.execute(
        text(f'SELECT rowid, embedding FROM "{sp.table_name}" WHERE rowid IN ({ids})')
    )
    return {int(r[0]): from_blob(r[1], sp.dims) for r in rows}


def score_candidates(store: Store, query: str, cands: list[Candidate]) -> None:
    """Fill ``similarity``, ``coverage`` and ``relevance`` of every candidate."""
    latin_terms, cjk_terms = query_terms(query)
    latin = [t.casefold() for t in latin_terms]
    grams = [g.rstrip("*") for g in cjk_terms]
    emb = store.embedder
    vecs: dict[tuple[str, int], np.ndarray[Any, Any]] = {}
    if emb is not None and not emb.model_id.startswith(LEXICAL_EMBEDDERS):
        with store.db.read() as conn:
            for kind, layer in (("memory", "l1"), ("message", "l0")):
                got = _vectors(conn, store, layer, [c.rowid for c in cands if c.kind == kind])
                vecs.update(((kind, i), v) for i, v in got.items())
    # Only with vectors to compare: the query's own (cached by the search)
    # and the null sentences' (cached in the database).
    qv = query_vector(store, query) if vecs else None
    floor: float | None = None
    if qv is not None and emb is not None:
        floor = float((null_vectors(store, emb) @ qv).mean())
    for c in cands:
        v = vecs.get((c.kind, c.rowid))
        c.similarity = float(v @ qv) if v is not None and qv is not None else None
        margin = c.similarity - floor if c.similarity is not None and floor is not None else None
        cov = coverage(latin, c.text) if latin else 0.0
        if grams:
            cjk = cjk_coverage(grams, c.text)
            cov = (cov * len(latin) + cjk * len(grams)) / (len(latin) + len(grams))
        c.coverage = cov
        c.relevance = relevance(margin, cov)


def from_hits(kind: str, hits: list[Hit]) -> list[Candidate]:
    return [
        Candidate(kind=kind, rowid=h.id, ref=h.ref, text=h.text, search_score=float(h.score))
        for h in hits
    ]
