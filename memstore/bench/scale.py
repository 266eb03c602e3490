"""Scale benchmark: one file holding N L0 messages and N L1 memories.

For each size N (default 10k and 100k; 1M opt-in) a fresh store gets
synthetic users (1,000 messages each, sessions of 20) and conversations
through ``Store.capture``, and N memories through the derivation event log
(``l1.written`` events, 500 per transaction, the same event the host memory
tool appends; the inline L1 projection applies them). Then, each figure
next to a reference measured in the same process on the same data:

============================  ============================================
memstore                      reference
============================  ============================================
fill: capture, 20 per call    raw sqlite3 insert of the same rows, 20 per commit
capture_turn p50/p99,         capture_turn with the indexer stopped; raw
  background indexer working  sqlite3 insert, one row per commit
reindex rows/s                the embedder alone on a sample of the texts
  (rows the background indexer had not embedded when the fill ended)
hybrid search (L0) p50/p95    numpy brute-force cosine over the user's vectors
                              (the very vectors the store searches)
keyword search (L0) p50/p95   FTS5 alone, same match expression, same user's rows
search_memories, recall       (recall's floor is search_memories)
rebuild events/s              read + JSON-decode every event with the bare driver
database MB                   (raw table, no indexes, no vectors)
peak RSS                      RSS after imports, before the store opens
============================  ============================================

The store runs with the settings a user gets (``Settings()`` defaults:
background indexer on, context vectors on); only the derivation scheduler is
off (no LLM here). Embeddings: the hashing embedder by default, at every size
(so the curves compare like with like; e5 embeds ~60 texts/s here, 200k
texts would take an hour). ``--embedder e5`` uses a pool of ``distinct``
texts instead, and the (model, content hash) embedding cache embeds each
once, as in ``bench search`` (with context vectors each "previous + this"
pair is still embedded once). Each size runs in a child process so its peak
RSS is its own. Percentiles with too few samples for them print as "-".
"""

from __future__ import annotations

import json
import math
import random
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from memstore.bench.capture_search import queries, stats, text_pool, time_fts5, time_numpy_topk
from memstore.config import Settings
from memstore.db.driver import sqlite_module
from memstore.derive.events import MemoryWritten
from memstore.derive.queries import DEFAULT_GENERATION
from memstore.derive.runs import append_checked, new_id
from memstore.store import Store
from memstore.vectors.hot import partition_vectors

DEFAULT_SIZES = (10_000, 100_000)
MILLION = 1_000_000
PER_USER = 1000
SESSION = 20
L1_BATCH = 500


def _rss_mb() -> float:
    # Linux reports ru_maxrss in KiB (macOS in bytes; this bench targets Linux).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Raw:
    """The reference table: same rows, bare driver, same pragmas, no projections."""

    def __init__(self, path: Path) -> None:
        self.conn: Any = sqlite_module().connect(str(path), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute(
            "CREATE TABLE msgs (id INTEGER PRIMARY KEY, user_id TEXT, session_id TEXT, "
            "role TEXT, text TEXT, ts TEXT)"
        )

    def insert(self, rows: Sequence[tuple[str, str, str, str, str]]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(
            "INSERT INTO msgs (user_id, session_id, role, text, ts) VALUES (?, ?, ?, ?, ?)", rows
        )
        self.conn.execute("COMMIT")


def capture_calls(size: int, users: int, pool: Sequence[str]) -> list[tuple[str, str, list[Any]]]:
    """(user, session, messages) capture calls: users round-robin, 20 messages a call."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    calls: list[tuple[str, str, list[Any]]] = []
    for call, i in enumerate(range(0, size, SESSION)):
        msgs = [
            {
                "role": "user" if j % 2 == 0 else "assistant",
                "content": pool[(i + j) % len(pool)],
                "timestamp": start + timedelta(seconds=i + j),
                "id": f"m{i + j}",
            }
            for j in range(min(SESSION, size - i))
        ]
        calls.append((f"u{call % users:04d}", f"s{call // users}", msgs))
    return calls


def seed_decision(
    content: str, type_: str = "persona", reason: str = "bench scale"
) -> dict[str, Any]:
    """A host "store" decision for seeding memories, shared by the benches that fill
    stores (the shape MemoryWritten carries, see memstore.derive.events.L1Extracted)."""
    return {
        "action": "store",
        "new_id": new_id(),
        "target_ids": [],
        "content": content,
        "type": type_,
        "priority": 70,
        "scene_name": "",
        "source_message_ids": [],
        "activity_start": None,
        "activity_end": None,
        "occurred_at": None,
        "candidate": content,
        "reason": reason,
        "degraded_from": None,
    }


def fill_memories(store: Store, size: int, users: int, pool: Sequence[str]) -> float:
    t0 = time.perf_counter()
    per_user = max(size // users, 1)
    n = 0
    for u in range(users):
        user = f"u{u:04d}"
        for i in range(0, per_user, L1_BATCH):
            batch = [
                MemoryWritten(DEFAULT_GENERATION, "host", seed_decision(pool[(n + j) % len(pool)]))
                for j in range(min(L1_BATCH, per_user - i))
            ]
            n += len(batch)
            append_checked(store.internals.derivation, user, batch)
    return time.perf_counter() - t0


def _vectors(store: Store, user: str) -> np.ndarray[Any, Any]:
    """The user's vectors, read from vec0 (their one stored copy)."""
    with store.internals.db.read() as conn:
        sp = store.internals.search_engine.space(conn, "l0")
        assert sp is not None
        return partition_vectors(conn, sp, user)[1]


def _search(store: Store, qs: Sequence[str], users: int) -> dict[str, Any]:
    assert store.internals.embedder is not None
    rng = random.Random(5)
    targets = [f"u{rng.randrange(users):04d}" for _ in qs]
    out: dict[str, Any] = {}
    cases: dict[str, Callable[[str, str], object]] = {
        "keyword_l0": lambda q, u: store.search_conversations(u, q, limit=10, strategy="keyword"),
        "hybrid_l0": lambda q, u: store.search_conversations(u, q, limit=10),
        "hybrid_l1": lambda q, u: store.search_memories(u, q, limit=10),
        "recall": lambda q, u: store.recall(u, q),
    }
    # Large users' keyword postings load in a thread on a first search, as
    # their vectors load on one: both are loaded before the timed searches.
    for u in sorted(set(targets)):
        store.search_conversations(u, "warm-up", limit=10)
    store.internals.search_engine.hot_postings.wait()
    for name, fn in cases.items():
        ms: list[float] = []
        for q, u in zip(qs, targets, strict=True):
            store.internals.search_engine.queries.cache.clear()  # time the query embedding
            t0 = time.perf_counter()
            fn(q, u)
            ms.append((time.perf_counter() - t0) * 1000)
        out[name] = stats(ms)
    mats = {u: _vectors(store, u) for u in set(targets)}
    # Query embedding stays outside the timing: the reference is the scan.
    qvecs = [store.internals.embedder.embed_query(q) for q in qs]
    out["ref_numpy_cosine"] = time_numpy_topk([mats[u] for u in targets], qvecs, 10)
    out["ref_fts5_alone"] = time_fts5(store, qs, targets, 10)
    return out


def _capture(store: Store, users: int, turns: int, session: str) -> dict[str, float]:
    lat: list[float] = []
    for i in range(turns):
        t0 = time.perf_counter()
        store.capture_turn(
            f"u{i % users:04d}", session, f"{session} turn {i}: the pottery class?", "ok"
        )
        lat.append((time.perf_counter() - t0) * 1000)
    return stats(lat)


def _raw_replay(path: Path) -> tuple[int, float]:
    conn: Any = sqlite_module().connect(str(path))
    t0 = time.perf_counter()
    n = 0
    for (payload,) in conn.execute("SELECT payload FROM events ORDER BY position"):
        json.loads(payload)
        n += 1
    took = time.perf_counter() - t0
    conn.close()
    return n, took


def checkpointed_mb(path: Path) -> float:
    """File size after folding the WAL in (a checkpoint cannot run inside a transaction,
    so on its own bare connection)."""
    conn: Any = sqlite_module().connect(str(path), isolation_level=None)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return _file_mb(path)


def _file_mb(path: Path) -> float:
    wal = path.with_name(path.name + "-wal")
    return (path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)) / 1e6


def measure_size(
    size: int, embedder: str, distinct: int | None, n_queries: int, capture_turns: int, workdir: str
) -> dict[str, Any]:
    """Everything for one size; meant to run in a fresh process (peak RSS is per process)."""
    base = Path(workdir)
    rss_base = _rss_mb()
    users = max(1, size // PER_USER)
    n_texts = distinct if distinct is not None else (1500 if embedder == "e5" else size)
    pool = text_pool(n_texts, seed=7)
    mem_pool = [f"The user mentioned: {t}" for t in text_pool(n_texts, seed=21)]
    calls = capture_calls(size, users, pool)
    res: dict[str, Any] = {"size": size, "users": users, "distinct_texts": n_texts}
    settings = Settings().replace(embedder=embedder, scheduler=False)
    path = base / f"scale-{size}.db"
    with Store.open(path, settings=settings) as store:
        assert store.internals.embedder is not None
        t0 = time.perf_counter()
        for user, session, msgs in calls:
            store.capture(user, session, msgs)
        res["fill_l0_per_s"] = size / (time.perf_counter() - t0)
        raw = _Raw(base / f"raw-{size}.db")
        t0 = time.perf_counter()
        for user, session, msgs in calls:
            raw.insert(
                [(user, session, m["role"], m["content"], str(m["timestamp"])) for m in msgs]
            )
        res["ref_raw_insert_per_s"] = size / (time.perf_counter() - t0)
        res["fill_l1_per_s"] = size / fill_memories(store, size, users, mem_pool)
        if hasattr(store.internals.embedder, "load"):
            store.internals.embedder.load()  # model load is start-up, not throughput
        t0 = time.perf_counter()
        rows = store.reindex()
        took = time.perf_counter() - t0
        res["reindex"] = {"rows": rows, "rows_per_s": rows / took if took else None}
        sample = pool[: min(len(pool), 2000)]
        t0 = time.perf_counter()
        store.internals.embedder.embed_documents(sample)
        res["reindex"]["ref_embed_only_per_s"] = len(sample) / (time.perf_counter() - t0)
        res["db_mb"] = checkpointed_mb(path)
        # Capture while the background indexer embeds each new turn (what a
        # user's store does), then with it stopped: the ratio is what the
        # indexer's transactions cost capture.
        res["capture"] = _capture(store, users, capture_turns, "live")
        store.internals.stop_background()
        res["capture_idle"] = _capture(store, users, capture_turns, "idle")
        store.start_background()
        ref: list[float] = []
        for i in range(capture_turns):
            t0 = time.perf_counter()
            raw.insert([(f"u{i % users:04d}", "live", "user", f"live turn {i}", "")])
            ref.append((time.perf_counter() - t0) * 1000)
        res["ref_raw_insert_one"] = stats(ref)
        raw.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raw.conn.close()
        res["ref_raw_db_mb"] = _file_mb(base / f"raw-{size}.db")
        store.reindex()  # the live turns, so search sees an idle index
        res["search"] = _search(store, queries(n_queries), users)
        t0 = time.perf_counter()
        replayed = store.rebuild()
        took = time.perf_counter() - t0
        n_raw, raw_took = _raw_replay(path)
        res["rebuild"] = {
            "events": replayed,
            "events_per_s": replayed / took if took else None,
            "ref_read_decode_per_s": n_raw / raw_took if raw_took else None,
        }
    res["rss_mb"] = {"peak": _rss_mb(), "ref_after_imports": rss_base}
    for p in (path, base / f"raw-{size}.db"):
        for suffix in ("", "-wal", "-shm", "-lock"):
            p.with_name(p.name + suffix).unlink(missing_ok=True)
    return res


def run_scale(
    sizes: Sequence[int] = DEFAULT_SIZES,
    *,
    embedder: str = "hashing",
    distinct: int | None = None,
    n_queries: int = 200,
    capture_turns: int = 2000,
    workdir: Path | None = None,
    isolate: bool = True,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Measure every size (each in its own process unless ``isolate=False``)."""
    res: dict[str, Any] = {
        "embedder": embedder,
        "per_user": PER_USER,
        "queries": n_queries,
        "capture_turns": capture_turns,
        "isolated_processes": isolate,
        "runs": [],
    }
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for size in sizes:
            log(f"scale {size:,}: L0 + L1 fill, reindex, capture, search, rebuild")
            t0 = time.perf_counter()
            args = (size, embedder, distinct, n_queries, capture_turns, tmp)
            if isolate:
                with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
                    run = pool.submit(measure_size, *args).result()
            else:
                run = measure_size(*args)
            run["wall_s"] = time.perf_counter() - t0
            log(f"scale {size:,}: done in {run['wall_s']:.0f} s")
            res["runs"].append(run)
    return res


def format_scale(res: dict[str, Any]) -> str:
    runs = res["runs"]
    lines = [
        f"scale: N L0 messages + N L1 memories in one file, {res['per_user']} messages per user, "
        f"embedder {res['embedder']}, {res['queries']} distinct queries, "
        f"{res.get('capture_turns', '?')} capture turns; "
        "defaults (indexer on, context vectors on); "
        + ("each size in its own process" if res["isolated_processes"] else "one process"),
        "",
        f"{'N':>9} {'db MB':>7} {'raw MB':>7} {'L0 fill/s':>10} {'raw ins/s':>10} "
        f"{'L1 fill/s':>10} {'reindex/s':>10} {'emb only/s':>10} {'rebuild ev/s':>12} "
        f"{'raw dec/s':>10} {'RSS MB':>7} {'base MB':>8}",
    ]
    for r in runs:
        lines.append(
            f"{r['size']:>9,} {r['db_mb']:>7.0f} {r['ref_raw_db_mb']:>7.0f} "
            f"{r['fill_l0_per_s']:>10,.0f} {r['ref_raw_insert_per_s']:>10,.0f} "
            f"{r['fill_l1_per_s']:>10,.0f} {r['reindex']['rows_per_s'] or 0:>10,.0f} "
            f"{r['reindex']['ref_embed_only_per_s']:>10,.0f} "
            f"{r['rebuild']['events_per_s'] or 0:>12,.0f} "
            f"{r['rebuild']['ref_read_decode_per_s'] or 0:>10,.0f} "
            f"{r['rss_mb']['peak']:>7.0f} {r['rss_mb']['ref_after_imports']:>8.0f}"
        )
    lines += ["", f"{'N':>9} {'latency (ms)':<30} {'p50':>8} {'p95':>8} {'p99':>8}"]
    names = (
        ("capture", "capture_turn, indexer working"),
        ("capture_idle", "  ref capture, indexer stopped"),
        ("ref_raw_insert_one", "  ref raw insert, 1/commit"),
        ("keyword_l0", "keyword search L0"),
        ("ref_fts5_alone", "  ref FTS5 alone, same user"),
        ("hybrid_l0", "hybrid search L0 (+q. emb.)"),
        ("hybrid_l1", "hybrid search L1 (+q. emb.)"),
        ("recall", "recall (L1 + persona/scenes)"),
        ("ref_numpy_cosine", "  ref numpy cosine (L0)"),
    )
    for r in runs:
        for key, label in names:
            s = r.get(key) if key.startswith(("capture", "ref_raw")) else r["search"].get(key)
            if s is None:
                continue
            lines.append(
                f"{r['size']:>9,} {label:<30} " + " ".join(_ms(s[f"p{p}_ms"]) for p in (50, 95, 99))
            )
        idle = r.get("capture_idle")
        if idle:
            lines.append(
                f"{r['size']:>9,} {'capture working / stopped':<30} "
                + " ".join(_ratio(r["capture"][f"p{p}_ms"], idle[f"p{p}_ms"]) for p in (50, 95, 99))
            )
    return "\n".join(lines)


def _ms(v: float) -> str:
    return f"{'-':>8}" if math.isnan(v) else f"{v:>8.2f}"


def _ratio(a: float, b: float) -> str:
    return f"{'-':>8}" if math.isnan(a) or math.isnan(b) or not b else f"{a / b:>7.2f}x"
