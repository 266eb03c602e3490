"""One large user's hybrid search against its targets, with its references.

The targets for one user × 100k messages: hybrid p95 < 20 ms with the
hashing embedder, < 35 ms including an e5 query embedding. This bench opens
an existing store (a copy of a ``bench scale --keep`` store: it opens it with
the background indexer and the scheduler off; its first search loads the
user's in-memory vectors (memstore.vectors.hot) and starts loading the keyword
postings in a thread (memstore.search.postings), both timed apart). Then,
per query and interleaved so they share the machine's noise:

- ``hybrid``: ``search_conversations`` as a caller gets it, the query
  embedding included (the query cache is cleared first); also as the
  process's CPU time;
- ``hybrid_cached``: the same search again, its query vector cached;
- ``hybrid_prefetched``: with the query embedding started in a thread just
  before the search (``prefetch_query``, as recall does), so it overlaps the
  keyword side: what the engine would gain by doing so itself;
- ``keyword``: ``strategy="keyword"``;
- ``ranking`` / ``ranking_sql``: the keyword ranking alone from the postings
  and from SQL (memstore.search.bm25 without them), whose lists must agree;
- references: ``ref_fts5_bm25``, FTS5 MATCH + ``bm25()`` over the user's rows
  (top 10: what the keyword side cost before the postings); ``ref_numpy``,
  a matrix product over the user's vectors; ``ref_embed``, the query
  embedding alone.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from memstore.bench.capture_search import fts5_ms, queries, stats
from memstore.bench.keyword import loadavg
from memstore.config import Settings
from memstore.search import bm25
from memstore.store import Store
from memstore.vectors.hot import partition_vectors

_TOP = 10
_NAMES = (
    "hybrid",
    "hybrid_cpu",
    "hybrid_cached",
    "hybrid_prefetched",
    "keyword",
    "ranking",
    "ranking_sql",
    "ref_fts5_bm25",
    "ref_numpy",
    "ref_embed",
)


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def run_large_user(store_path: Path, embedder: str, n_queries: int) -> dict[str, Any]:
    settings = Settings().replace(embedder=embedder, background_indexer=False, scheduler=False)
    qs = queries(n_queries)
    times: dict[str, list[float]] = {name: [] for name in _NAMES}
    same = 0
    res: dict[str, Any] = {"embedder": embedder, "queries": len(qs), "load_before": loadavg()}
    with Store.open(store_path, settings=settings) as store:
        engine, emb = store.internals.search_engine, store.internals.embedder
        assert emb is not None
        with store.internals.db.read() as conn:
            user, docs = conn.exec_driver_sql(
                "SELECT user_id, docs FROM l0_user_slots ORDER BY docs DESC LIMIT 1"
            ).one()
            sp = engine.space(conn, "l0")
            assert sp is not None and sp.ready, "the store's vectors are not indexed"
            mat = partition_vectors(conn, sp, user)[1]
        res |= {"user": user, "messages": int(docs)}
        t0 = time.perf_counter()
        store.search_conversations(user, "warm-up", limit=_TOP)
        res["first_search_ms"] = _ms(t0)
        # The postings load in a thread meanwhile; the timed searches use them.
        t0 = time.perf_counter()
        engine.hot_postings.wait()
        res["postings_wait_ms"] = _ms(t0)
        for q in qs:
            engine.queries.cache.clear()
            t0, c0 = time.perf_counter(), time.process_time()
            store.search_conversations(user, q, limit=_TOP)
            times["hybrid"].append(_ms(t0))
            times["hybrid_cpu"].append((time.process_time() - c0) * 1000)
            t0 = time.perf_counter()
            store.search_conversations(user, q, limit=_TOP)
            times["hybrid_cached"].append(_ms(t0))
            engine.queries.cache.clear()
            t0 = time.perf_counter()
            engine.prefetch_query(q)
            store.search_conversations(user, q, limit=_TOP)
            times["hybrid_prefetched"].append(_ms(t0))
            t0 = time.perf_counter()
            store.search_conversations(user, q, limit=_TOP, strategy="keyword")
            times["keyword"].append(_ms(t0))
            with store.internals.db.read() as conn:
                t0 = time.perf_counter()
                fast = bm25.keyword_messages(conn, q, user, _TOP, hot=engine.hot_postings)
                times["ranking"].append(_ms(t0))
                t0 = time.perf_counter()
                slow = bm25.keyword_messages(conn, q, user, _TOP)
                times["ranking_sql"].append(_ms(t0))
                same += fast == slow
                times["ref_fts5_bm25"].append(fts5_ms(conn, q, user, _TOP))
            t0 = time.perf_counter()
            v = emb.embed_query(q)
            times["ref_embed"].append(_ms(t0))
            t0 = time.perf_counter()
            sims = mat @ np.asarray(v, dtype=np.float32)
            top = np.argpartition(-sims, _TOP - 1)[:_TOP]
            top[np.argsort(-sims[top])]
            times["ref_numpy"].append(_ms(t0))
        res["postings_users"] = engine.hot_postings.cached_users()
    res |= {name: stats(ms) for name, ms in times.items()}
    res["ranking_same_as_sql"] = same
    res["load_after"] = loadavg()
    return res


_ROWS = (
    ("hybrid", "hybrid, query embedding included", None),
    ("hybrid_cpu", "  same calls, CPU time of the process", None),
    ("hybrid_cached", "hybrid, query vector cached", None),
    ("hybrid_prefetched", "hybrid, embedding started in a thread first", "hybrid"),
    ("keyword", "keyword (search_conversations)", "ref_fts5_bm25"),
    ("ranking", "  ranking from postings", "ref_fts5_bm25"),
    ("ranking_sql", "  ranking from SQL (before)", "ref_fts5_bm25"),
    ("ref_fts5_bm25", "ref: FTS5 MATCH + bm25(), user's rows", None),
    ("ref_numpy", "ref: numpy cosine, user's vectors", None),
    ("ref_embed", "ref: query embedding alone", None),
)


def format_large_user(res: dict[str, Any]) -> str:
    n = res["queries"]
    out = [
        f"one user ({res['user']}, {res['messages']:,} messages), {res['embedder']} embedder, "
        f"{n} queries; first search (loads the vectors, starts the postings) "
        f"{res['first_search_ms']:.0f} ms, postings ready "
        f"{res['postings_wait_ms']:.0f} ms later"
    ]
    for name, label, ref in _ROWS:
        p50, p95 = res[name]["p50_ms"], res[name]["p95_ms"]
        ratio = ""
        if ref is not None:
            ratio = f"   ({p50 / res[ref]['p50_ms']:.2f}x / {p95 / res[ref]['p95_ms']:.2f}x ref)"
        out.append(f"  {label:<46} p50 {p50:8.2f}   p95 {p95:8.2f} ms{ratio}")
    out.append(
        f"  ranking from postings = from SQL (ids and scores): {res['ranking_same_as_sql']}/{n}"
    )
    out.append(f"  load average before {res['load_before']}, after {res['load_after']}")
    return "\n".join(out)
