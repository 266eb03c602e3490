"""Capture and search benchmarks on synthetic conversations, with references.

Layouts: one user holding every message, and 100 users sharing them (the
vec0 partition key and the FTS join then select 1/100 of the rows). For each
size the store is filled through ``Store.capture`` (20 messages per call),
then embedded with ``Store.reindex``, then:

- capture acknowledgement latency: ``capture_turn`` on top of the filled
  store, once with no indexer running and once with the background indexer
  embedding the new turns (capture never waits for it; this shows the cost of
  sharing the CPU and the write lock);
- search latency per strategy, including the query embedding (the engine's
  query cache is cleared before every timed query, outside the timing);
- references in the same run: numpy brute-force cosine over the very same
  vectors (read back from the store's embedding cache), and a bare FTS5
  ``MATCH`` on the same table with the same match expression.

Synthetic text comes from templated sentences over a small vocabulary, drawn
from a pool of ``distinct`` texts. With e5 (~60 sentences/s here) embedding
100k unique texts would take half an hour, so many messages share a text and
the (model, content hash) embedding cache embeds each distinct text once:
the vectors are real e5 vectors, the search runs over all N rows, but only
``distinct`` of them are unique. The output says so. Stores of later sizes
and layouts are seeded with the first store's embedding cache for the same
reason (same model, same texts: what a rebuild would reuse).

For the same reason these stores embed each message alone
(``context_vectors=False``): with the default "previous + this message"
vectors every text would be unique again. Search latency does not depend on
it (same dimension, same vec0 scan); embedding throughput is reported for
new texts.
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection

from memstore.bench.metrics import percentile
from memstore.config import Settings
from memstore.derive.messages.projection import user_fts_range
from memstore.embeddings import Embedder
from memstore.store import Store
from memstore.text import build_match
from memstore.vectors.hot import partition_vectors

_PEOPLE = [
    "Anna",
    "Ben",
    "Carla",
    "Dev",
    "Emma",
    "Farid",
    "Grace",
    "Hugo",
    "Ines",
    "Jonas",
    "Kemal",
    "Lena",
    "Mara",
    "Noor",
    "Omar",
    "Pia",
]
_PLACES = [
    "Lisbon",
    "Kyoto",
    "the lake house",
    "the office",
    "Berlin",
    "the climbing gym",
    "grandma's flat",
    "the farmers market",
    "Oaxaca",
    "the library",
    "the beach in Porto",
    "the old harbour",
]
_THINGS = [
    "sourdough bread",
    "a vintage camera",
    "the marathon",
    "a sketchbook",
    "the new bike",
    "sushi",
    "a pottery class",
    "the tax forms",
    "a violin",
    "the garden beds",
    "a road trip",
    "the puppy",
    "a chess tournament",
    "the kitchen renovation",
    "a yoga retreat",
    "the book club",
]
_FEELINGS = ["excited", "nervous", "tired", "proud", "curious", "relieved", "annoyed", "grateful"]
_WHEN = [
    "yesterday",
    "last weekend",
    "this morning",
    "in March",
    "two weeks ago",
    "on Friday",
    "tonight",
]
_TEMPLATES = (
    "I went to {place} with {person} {when} and we talked about {thing}.",
    "{person} told me {when} that they are {feeling} about {thing}.",
    "Can you remind me what I said about {thing} and {place}?",
    "I'm {feeling} because {thing} finally happened {when}.",
    "We should plan {thing} at {place} with {person}.",
    "My favourite memory of {place} is {thing} with {person}.",
    "Honestly I feel {feeling} about {thing}; {person} thinks I should go to {place}.",
    "Sure! Here is a short plan for {thing}: start small, ask {person}, and book {place}.",
    "That sounds {feeling}. How did {thing} at {place} go {when}?",
    "I started {thing} {when} and {person} joined me at {place}.",
)
_QUERIES = (
    "what did I say about {thing}",
    "when did I go to {place} with {person}",
    "{person} {thing}",
    "how do I feel about {thing}",
    "plans at {place}",
    "who joined me for {thing}",
)


def _fill(rng: random.Random, template: str) -> str:
    return template.format(
        person=rng.choice(_PEOPLE),
        place=rng.choice(_PLACES),
        thing=rng.choice(_THINGS),
        feeling=rng.choice(_FEELINGS),
        when=rng.choice(_WHEN),
    )


def text_pool(distinct: int, seed: int = 7) -> list[str]:
    """``distinct`` different sentences (a serial number breaks ties once the
    template space is exhausted, so the count is exact)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < distinct:
        s = _fill(rng, rng.choice(_TEMPLATES))
        if s in seen:
            s = f"{s} (note {len(out)})"
        seen.add(s)
        out.append(s)
    return out


def queries(count: int, seed: int = 11) -> list[str]:
    """Distinct queries, so no timed query is answered from a cache."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < count:
        q = _fill(rng, rng.choice(_QUERIES))
        if q not in out:
            out.append(q)
    return out


@dataclass(frozen=True)
class Layout:
    name: str
    users: int


LAYOUTS = (Layout("1 user", 1), Layout("100 users", 100))


def _settings(embedder: str, background: bool = False) -> Settings:
    return Settings().replace(
        embedder=embedder, background_indexer=background, scheduler=False, context_vectors=False
    )


def fill_store(store: Store, n: int, users: int, pool: Sequence[str], seed: int = 3) -> float:
    """Capture ``n`` messages, 20 per call, alternating roles; returns seconds."""
    rng = random.Random(seed)
    t0 = time.perf_counter()
    start = datetime(2024, 1, 1, tzinfo=UTC)
    for call, i in enumerate(range(0, n, 20)):
        user = f"u{call % users:03d}"
        msgs = [
            {
                "role": "user" if j % 2 == 0 else "assistant",
                "content": rng.choice(pool),
                "timestamp": start + timedelta(seconds=i + j),
                "id": f"m{i + j}",
            }
            for j in range(min(20, n - i))
        ]
        store.capture(user, f"s{call // users}", msgs)
    return time.perf_counter() - t0


def _copy_cache(src: Path, dst: Store) -> None:
    with dst.internals.db.write() as conn:
        conn.exec_driver_sql(f"ATTACH DATABASE '{src}' AS seed")
        conn.exec_driver_sql(
            "INSERT OR IGNORE INTO embedding_cache SELECT * FROM seed.embedding_cache"
        )
    with dst.internals.db.write() as conn:
        conn.exec_driver_sql("DETACH DATABASE seed")


def _vectors_by_user(store: Store, embedder: Embedder) -> dict[str, np.ndarray[Any, Any]]:
    """Every message's vector, read from vec0 (their one stored copy), by user."""
    with store.internals.db.read() as conn:
        sp = store.internals.search_engine.space(conn, "l0")
        assert sp is not None
        users = [r[0] for r in conn.exec_driver_sql("SELECT DISTINCT user_id FROM l0_messages")]
        return {u: partition_vectors(conn, sp, u)[1] for u in users}


# Fewest samples a percentile needs to be more than the largest sample or two:
# p95 from 20 values is the 19th, p99 from 100 the 99th.
MIN_SAMPLES = {50: 2, 95: 20, 99: 100}


def stats(ms: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 and ``n``; a percentile with too few samples is NaN
    (printed as "-"), not a maximum presented as a tail."""
    out = {
        f"p{p}_ms": percentile(ms, p) if len(ms) >= MIN_SAMPLES[p] else math.nan
        for p in (50, 95, 99)
    }
    out["n"] = len(ms)
    return out


def time_numpy_topk(mats: Sequence[Any], qvecs: Sequence[Any], top: int) -> dict[str, float]:
    """The reference for vector search: exact top-k by numpy over each query's
    matrix (the same vectors the store searches), timed per query."""
    ms: list[float] = []
    for mat, v in zip(mats, qvecs, strict=True):
        t0 = time.perf_counter()
        sims = mat @ v
        k = min(top, len(sims))
        idx = np.argpartition(-sims, k - 1)[:k]
        idx[np.argsort(-sims[idx])]
        ms.append((time.perf_counter() - t0) * 1000)
    return stats(ms)


def time_fts5(store: Store, qs: Sequence[str], users: Sequence[str], top: int) -> dict[str, float]:
    """The reference for keyword search: a bare FTS5 MATCH ranked by BM25 with
    the same match expression and no join, over ``users[i]``'s rows for
    ``qs[i]`` (the same user the timed search asks for)."""
    with store.internals.db.read() as conn:
        return stats([fts5_ms(conn, q, user, top) for q, user in zip(qs, users, strict=True)])


def fts5_ms(conn: Connection, query: str, user: str, top: int) -> float:
    """Milliseconds of :func:`time_fts5`'s reference for one query, in the
    caller's read transaction (benches interleave it with what they time)."""
    raw = conn.connection.driver_connection
    assert raw is not None
    span = user_fts_range(conn, user)
    match = build_match(query)
    t0 = time.perf_counter()
    if match is not None and span is not None:
        raw.execute(
            "SELECT rowid FROM l0_fts WHERE l0_fts MATCH ? AND rowid BETWEEN ? AND ? "
            "ORDER BY rank LIMIT ?",
            (match, span[0], span[1], top),
        ).fetchall()
    return (time.perf_counter() - t0) * 1000


def _capture_latency(store: Store, turns: int, users: int, tag: str) -> dict[str, float]:
    lat: list[float] = []
    for i in range(turns):
        t0 = time.perf_counter()
        store.capture_turn(
            f"u{i % users:03d}",
            f"live-{tag}",
            f"live turn {tag} {i}: what about the pottery class?",
            f"Noted, turn {i}.",
        )
        lat.append((time.perf_counter() - t0) * 1000)
    return stats(lat)


def _search_block(
    store: Store, embedder: Embedder, qs: Sequence[str], users: int, top: int = 20
) -> dict[str, Any]:
    """Latency per strategy and of the two references, over the same queries."""
    mats = _vectors_by_user(store, embedder)
    # Only users that hold messages (a small size may not reach all of them).
    present = sorted(mats)
    rng = random.Random(5)
    targets = [rng.choice(present) for _ in qs]
    out: dict[str, Any] = {}
    for strategy in ("keyword", "vector", "hybrid"):
        lat: list[float] = []
        for q, user in zip(qs, targets, strict=True):
            store.internals.search_engine.queries.cache.clear()  # time the query embedding
            t0 = time.perf_counter()
            store.search_conversations(user, q, limit=top, strategy=strategy)
            lat.append((time.perf_counter() - t0) * 1000)
        out[strategy] = stats(lat)
    embed_ms: list[float] = []
    qvecs = []
    for q in qs:
        t0 = time.perf_counter()
        qvecs.append(embedder.embed_query(q))
        embed_ms.append((time.perf_counter() - t0) * 1000)
    out["query_embedding"] = stats(embed_ms)
    out["ref_numpy_cosine"] = time_numpy_topk([mats[u] for u in targets], qvecs, top)
    out["ref_fts5_alone"] = time_fts5(store, qs, targets, top)
    return out


def embed_throughput(embedder_name: str, rows: int, workdir: Path) -> dict[str, float]:
    """``Store.reindex`` rows/s when every text is new (nothing in the cache)."""
    pool = text_pool(rows, seed=99)
    with Store.open(workdir / "embed.db", settings=_settings(embedder_name)) as store:
        fill_store(store, rows, 1, pool)
        if store.internals.embedder is not None and hasattr(store.internals.embedder, "load"):
            store.internals.embedder.load()  # model load is start-up cost, not throughput
        t0 = time.perf_counter()
        done = store.reindex()
        took = time.perf_counter() - t0
    return {"rows": done, "seconds": took, "rows_per_s": done / took if took else float("nan")}


def run_capture_search(
    sizes: Sequence[int] = (10_000, 100_000),
    *,
    embedder: str = "e5",
    distinct: int | None = None,
    n_queries: int = 40,
    capture_turns: int = 300,
    layouts: Sequence[Layout] = LAYOUTS,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Fill, embed and measure each (size, layout); returns a JSON-ready dict."""
    if distinct is None:
        distinct = 1500 if embedder == "e5" else max(sizes)
    pool = text_pool(distinct)
    qs = queries(n_queries)
    res: dict[str, Any] = {
        "embedder": embedder,
        "distinct_texts": distinct,
        "queries": n_queries,
        "capture_turns": capture_turns,
        "runs": [],
    }
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        base = Path(tmp)
        log(f"embedding throughput ({embedder}, all texts new)")
        res["embedding_cold"] = embed_throughput(embedder, 256 if embedder == "e5" else 5000, base)
        seed_db: Path | None = None
        for size in sizes:
            for layout in layouts:
                path = base / f"s{size}-{layout.users}.db"
                log(f"{size} messages, {layout.name}: capture")
                with Store.open(path, settings=_settings(embedder)) as store:
                    if seed_db is not None:
                        _copy_cache(seed_db, store)
                    fill_s = fill_store(store, size, layout.users, pool)
                    log(f"{size} messages, {layout.name}: reindex")
                    t0 = time.perf_counter()
                    embedded = store.reindex()
                    reindex_s = time.perf_counter() - t0
                    assert store.internals.embedder is not None
                    log(f"{size} messages, {layout.name}: search")
                    run: dict[str, Any] = {
                        "size": size,
                        "layout": layout.name,
                        "users": layout.users,
                        "fill_messages_per_s": size / fill_s,
                        "reindex_rows": embedded,
                        "reindex_rows_per_s": embedded / reindex_s if reindex_s else None,
                        "reindex_cache_seeded": seed_db is not None,
                        "search": _search_block(store, store.internals.embedder, qs, layout.users),
                        "capture_idle": _capture_latency(store, capture_turns, layout.users, "a"),
                    }
                # Capture while the background indexer embeds the new turns.
                with Store.open(path, settings=_settings(embedder, background=True)) as store:
                    run["capture_with_indexer"] = _capture_latency(
                        store, capture_turns, layout.users, "b"
                    )
                run["db_mb"] = path.stat().st_size / 1e6
                res["runs"].append(run)
                if seed_db is None:
                    seed_db = path
    return res


def format_capture_search(res: dict[str, Any]) -> str:
    ec = res["embedding_cold"]
    lines = [
        f"embedder {res['embedder']}; {res['distinct_texts']} distinct synthetic texts "
        f"(messages share texts, so the embedding cache embeds each once; "
        f"single-message vectors); "
        f"{res['queries']} distinct queries",
        f"background embedding, all texts new: {ec['rows_per_s']:.1f} rows/s "
        f"({ec['rows']} rows in {ec['seconds']:.1f} s)",
        "",
        f"{'size':>7} {'layout':<10} {'capture p50/p99 ms':>19} {'+indexer p50/p99':>17} "
        f"{'reindex rows/s':>15} {'db MB':>7}",
    ]
    for r in res["runs"]:
        ci, cb = r["capture_idle"], r["capture_with_indexer"]
        lines.append(
            f"{r['size']:>7} {r['layout']:<10} {ci['p50_ms']:>9.2f} /{ci['p99_ms']:>7.2f} "
            f"{cb['p50_ms']:>8.2f} /{cb['p99_ms']:>7.2f} {r['reindex_rows_per_s'] or 0:>15,.0f} "
            f"{r['db_mb']:>7.1f}"
        )
    lines += ["", f"{'size':>7} {'layout':<10} {'search (ms)':<22} {'p50':>8} {'p95':>8}"]
    names = (
        ("keyword", "keyword"),
        ("vector", "vector (+query emb.)"),
        ("hybrid", "hybrid (+query emb.)"),
        ("query_embedding", "  query embedding"),
        ("ref_numpy_cosine", "  ref numpy cosine"),
        ("ref_fts5_alone", "  ref FTS5 alone"),
    )
    for r in res["runs"]:
        for key, label in names:
            s = r["search"][key]
            lines.append(
                f"{r['size']:>7} {r['layout']:<10} {label:<22} "
                f"{s['p50_ms']:>8.2f} {s['p95_ms']:>8.2f}"
            )
    return "\n".join(lines)
