"""Recall latency at scale (``memstore bench recall-scale``).

The target: ``Store.recall`` p95 under 50 ms, query embedding
included, with 10k L1 memories and 100k L0 messages in one file. The store
is filled as ``bench scale`` fills it (users of 1,000 messages in sessions
of 20, through ``Store.capture``; memories through the ``l1.written`` event
the host memory tool appends), from synthetic chat sentences about people,
places and plans. With e5 the texts come from a pool of ``distinct``
sentences, each embedded once through the (model, content hash) cache.

Each user the questions go to first gets one untimed recall, and the timing
starts once the in-memory copies those load are loaded (a running host's
state). Then for each of ``queries`` distinct questions, each for a random
user, the same question is timed as:

- ``recall``: ``Store.recall`` with the query-vector cache emptied first
  (what a host pays before a turn);
- ``embedding``: the query embedding alone (the engine's ``query_blob``,
  which also refills the cache for the steps below);
- ``search``: both hybrid searches recall runs (memories, conversations),
  query vector cached;
- ``score``: ``collect`` (the searches, loading the rows, the candidates'
  vectors and the gate's scores) minus ``search``;
- ``compose``: the stable part and spending the budget (``per_turn_part``,
  neighbouring turns included).

References in the same run, on the same questions and users: the bare
query embedding (``embed_query``, no cache, no blob) and the bare hybrid
conversation search with the embedding (``search_conversations``, cache
emptied), i.e. what one plain search costs.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memstore.bench.capture_search import queries, stats, text_pool
from memstore.bench.scale import PER_USER, capture_calls, fill_memories
from memstore.config import Settings
from memstore.embeddings import Embedder, FloatArray
from memstore.embeddings.e5 import E5Embedder
from memstore.recall import compose as rc
from memstore.recall import rank as rr
from memstore.store import Store
from memstore.text import fts_tidy

STEPS = ("recall", "embedding", "search", "score", "compose", "ref_embed_query", "ref_hybrid_l0")


def pick_embedder(name: str) -> str:
    """``auto``: e5 when installed (the offline default), else feature hashing."""
    if name == "auto":
        return "e5" if E5Embedder.is_available() else "hashing"
    return name


def build(
    path: Path, messages: int, memories: int, embedder: str, distinct: int | None
) -> dict[str, Any]:
    users = max(1, messages // PER_USER)
    n_texts = distinct if distinct is not None else (2000 if embedder == "e5" else messages)
    pool = text_pool(n_texts, seed=7)
    mem_pool = [f"The user mentioned: {t}" for t in text_pool(min(n_texts, memories), seed=21)]
    settings = Settings().replace(embedder=embedder, background_indexer=False, scheduler=False)
    t0 = time.perf_counter()
    with Store.open(path, settings=settings) as store:
        for user, session, msgs in capture_calls(messages, users, pool):
            store.capture(user, session, msgs)
        fill_memories(store, memories, users, mem_pool)
        assert store.internals.indexer is not None
        memo = MemoEmbedder(store.internals.indexer.embedder)
        store.internals.indexer.embedder = memo
        t1 = time.perf_counter()
        store.reindex()
        embed_s = time.perf_counter() - t1
    return {
        "users": users,
        "distinct_texts": n_texts,
        "build_s": time.perf_counter() - t0,
        "embedded_texts": memo.embedded,
        "embedded_rows": memo.asked,
        "embed_s": embed_s,
    }


class MemoEmbedder(Embedder):
    """The store's embedder, each distinct document text embedded once.

    The synthetic sessions repeat (a session is a window of the text pool), so
    with context vectors too a 100k-message store holds a few thousand
    distinct texts; the legacy (model, content hash) cache that used to
    deduplicate them is no longer written. Every stored vector is still the
    model's own vector of that row's text."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimensions = inner.dimensions
        self.memo: dict[str, FloatArray] = {}
        self.asked = 0
        self.embedded = 0

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        self.asked += len(texts)
        todo = list(dict.fromkeys(t for t in texts if t not in self.memo))
        if todo:
            self.memo.update(zip(todo, self.inner.embed_documents(todo), strict=True))
            self.embedded += len(todo)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return np.stack([self.memo[t] for t in texts])

    def embed_query(self, text: str) -> FloatArray:
        return self.inner.embed_query(text)


def _one(store: Store, q: str, u: str, ms: dict[str, list[float]]) -> None:
    """Time every step for question ``q`` of user ``u``."""
    emb = store.internals.embedder
    assert emb is not None
    engine = store.internals.search_engine
    budget = store.settings.recall.budget_chars
    clock = time.perf_counter
    engine.queries.cache.clear()
    t0 = clock()
    store.recall(u, q)
    ms["recall"].append((clock() - t0) * 1000)
    engine.queries.cache.clear()
    t0 = clock()
    engine.query_blob(q)
    ms["embedding"].append((clock() - t0) * 1000)
    t0 = clock()
    store.search_memories(u, q, limit=rr.MEMORY_CANDIDATES)
    store.search_conversations(u, q, limit=rr.MESSAGE_CANDIDATES)
    searched = (clock() - t0) * 1000
    ms["search"].append(searched)
    t0 = clock()
    cands = rr.collect(store.internals.derivation, q, u, None, set())
    ms["score"].append(max((clock() - t0) * 1000 - searched, 0.0))
    t0 = clock()
    stable = rc.stable_part(store.internals.derivation, u, int(budget * rc.STABLE_SHARE))
    room = budget - len(stable.text) - 1
    rc.per_turn_part(store.internals.derivation, q, cands, room, store.settings.recall.threshold)
    ms["compose"].append((clock() - t0) * 1000)
    t0 = clock()
    emb.embed_query(q)
    ms["ref_embed_query"].append((clock() - t0) * 1000)
    engine.queries.cache.clear()
    t0 = clock()
    store.search_conversations(u, q, limit=10)
    ms["ref_hybrid_l0"].append((clock() - t0) * 1000)


def measure(store: Store, qs: list[str], users: int) -> dict[str, dict[str, float]]:
    rng = random.Random(5)
    targets = [f"u{rng.randrange(users):04d}" for _ in qs]
    ms: dict[str, list[float]] = {k: [] for k in STEPS}
    # Untimed: the model, the null vectors, and each user's in-memory vector
    # and keyword copies (loaded in the background on the user's first
    # search), as a running host has them. With only the first user warmed,
    # a fifth to two fifths of the timed recalls were a user's first and ran
    # beside its copies' loading: p95 37-41 ms where the warm p95 is ~12.
    engine = store.internals.search_engine
    for u in dict.fromkeys(targets):
        _one(store, qs[0], u, {k: [] for k in STEPS})
    engine.hot.wait()
    engine.hot_postings.wait()
    for q, u in zip(qs, targets, strict=True):
        _one(store, q, u, ms)
    return {k: stats(v) for k, v in ms.items()}


def run_recall_scale(
    *,
    messages: int = 100_000,
    memories: int = 10_000,
    n_queries: int = 200,
    embedder: str = "auto",
    distinct: int | None = None,
    keep: Path | None = None,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """``keep``: build the store at this path and reuse it on the next run
    with the same sizes and embedder (its build record sits beside it)."""
    name = pick_embedder(embedder)
    res: dict[str, Any] = {
        "messages": messages,
        "memories": memories,
        "queries": n_queries,
        "embedder": name,
        "threshold": Settings().recall.threshold,
        "budget_chars": Settings().recall.budget_chars,
    }
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        path = keep if keep is not None else Path(tmp) / "recall-scale.db"
        res |= _built(path, messages, memories, name, distinct, log)
        log(f"recall-scale: built in {res['build_s']:.0f} s; timing {n_queries} queries")
        settings = Settings().replace(embedder=name, background_indexer=False, scheduler=False)
        load_before = os.getloadavg()
        with Store.open(path, settings=settings) as store:
            # The build runs without the background indexer, which in a default
            # store merges FTS5's segments as they pile up; merge them now so
            # the timing sees the index a user's store has.
            res["fts_tidy_steps"] = fts_tidy.tidy(store.internals.db)
            res["latency"] = measure(store, queries(n_queries, seed=13), res["users"])
        res["loadavg"] = {"before": load_before, "after": os.getloadavg()}
    return res


def _built(
    path: Path,
    messages: int,
    memories: int,
    embedder: str,
    distinct: int | None,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The build record of the store at ``path``, building it unless a
    complete one of the same shape is there."""
    record = path.with_name(path.name + ".build.json")
    shape = {"messages": messages, "memories": memories, "embedder": embedder}
    shape["distinct"] = distinct
    if record.exists():
        got: dict[str, Any] = json.loads(record.read_text())
        if got.get("shape") == shape and path.exists():
            log(f"recall-scale: reusing the store at {path}")
            return dict(got["build"])
    for leftover in path.parent.glob(path.name + "*"):
        leftover.unlink()
    log(f"recall-scale: {messages:,} messages + {memories:,} memories, embedder {embedder}")
    built = build(path, messages, memories, embedder, distinct)
    record.write_text(json.dumps({"shape": shape, "build": built}))
    return built


LABELS = {
    "recall": "Store.recall (+ query embedding)",
    "embedding": "  query embedding",
    "search": "  hybrid searches, L1 + L0",
    "score": "  rows, vectors, gate scores",
    "compose": "  stable part + budget",
    "ref_embed_query": "ref: bare embed_query",
    "ref_hybrid_l0": "ref: hybrid L0 search (+ emb.)",
}


def format_recall_scale(res: dict[str, Any]) -> str:
    la = res["loadavg"]
    lines = [
        f"recall-scale: {res['messages']:,} messages + {res['memories']:,} memories in one file, "
        f"{res['users']} users, {res['distinct_texts']:,} distinct texts, embedder "
        f"{res['embedder']}, gate {res['threshold']}, budget {res['budget_chars']}; "
        f"{res['queries']} queries (built in {res['build_s']:.0f} s"
        + (
            f"; {res['embedded_texts']:,} distinct texts embedded for "
            f"{res['embedded_rows']:,} rows in {res['embed_s']:.0f} s)"
            if "embedded_texts" in res
            else ")"
        ),
        f"FTS5 merge steps before timing: {res.get('fts_tidy_steps', 0)}; "
        "load average before / after timing: "
        + " / ".join(" ".join(f"{x:.2f}" for x in la[k]) for k in ("before", "after")),
        f"{'latency (ms)':<34}{'p50':>8}{'p95':>8}{'p99':>8}",
    ]
    for key, label in LABELS.items():
        s = res["latency"][key]
        lines.append(f"{label:<34}{s['p50_ms']:>8.2f}{s['p95_ms']:>8.2f}{s['p99_ms']:>8.2f}")
    return "\n".join(lines)
