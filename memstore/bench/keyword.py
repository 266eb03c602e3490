"""Keyword search at scale: per-user BM25 next to FTS5 filtered by the same user.

A store of ``users`` × ``per_user`` synthetic messages (the text pool of
``bench scale``, sessions of 20, users round-robin as they would arrive) is
built once through the event log (200 capture events per transaction, no
embedder: keyword search never reads vectors) and reused from ``--store``.
Before timing, the FTS5 segments the build left are merged as the background
indexer of a default store merges them (memstore.text.fts_tidy). Then, for
the same queries and the same target users, interleaved so they share the
machine's noise:

- ``keyword``: ``Store.search_conversations(strategy="keyword")``, everything
  a caller pays (read transaction, per-user BM25, content-free handling,
  reading the returned rows); also as CPU time of the thread, which a
  shared machine's load inflates less than wall time;
- ``ranking``: the per-user ranking alone from SQL (memstore.search.bm25;
  a user with at least ``postings.MIN_DOCS`` messages is ranked from
  in-memory postings inside ``keyword``, loaded before the timing);
- ``ref_fts5_same_user``: a bare FTS5 MATCH over the same user's rowid range,
  ranked by ``bm25()`` (global statistics), top 10: the reference.

Agreement: per query, the per-user top 10 against ``bm25()``'s top 10 over
the same user's rows. With one user both use the same statistics, so the
lists must be identical (scores too); with many users they differ by
design (another user's words no longer weigh in), and the overlap says how much.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memstore.bench.capture_search import queries, stats, text_pool
from memstore.bench.scale import capture_calls
from memstore.config import Settings
from memstore.l0.capture import capture_event, prepare_messages
from memstore.l0.projection import user_fts_range
from memstore.search import bm25, postings
from memstore.store import Store
from memstore.text import build_match, fts_tidy

_PER_TRANSACTION = 200
_TOP = 10


def _settings() -> Settings:
    return Settings().replace(embedder="none", background_indexer=False, scheduler=False)


def build_store(path: Path, users: int, per_user: int, log: Callable[[str], None]) -> float:
    """Fill ``path`` with ``users`` × ``per_user`` messages; seconds taken."""
    size = users * per_user
    pool = text_pool(min(size, 20_000))
    t0 = time.perf_counter()
    with Store.open(path, settings=_settings()) as store:
        calls = capture_calls(size, users, pool)
        for i in range(0, len(calls), _PER_TRANSACTION):
            events = [
                capture_event(
                    user,
                    session,
                    None,
                    prepare_messages(
                        session, msgs, now=store.internals.kernel.clock(), max_bytes=1 << 20
                    ),
                )
                for user, session, msgs in calls[i : i + _PER_TRANSACTION]
            ]
            store.internals.kernel.append(events)
            if i % 1000 == 0:
                log(f"  {min(i + _PER_TRANSACTION, len(calls)) * 20:,} messages")
    return time.perf_counter() - t0


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # not Linux
        return "n/a"


def run_keyword_bench(
    *,
    users: int,
    per_user: int,
    n_queries: int,
    store_path: Path,
    log: Callable[[str], None],
) -> dict[str, Any]:
    built = None
    if not store_path.exists():
        log(f"building {users} users x {per_user} messages in {store_path}")
        built = build_store(store_path, users, per_user, log)
    qs = queries(n_queries)
    rng = random.Random(5)
    targets = [f"u{rng.randrange(users):04d}" for _ in qs]
    times: dict[str, list[float]] = {
        "keyword": [],
        "keyword_cpu": [],
        "ranking": [],
        "ref_fts5_same_user": [],
    }
    identical = exact = 0
    overlap = 0.0
    load_before = loadavg()
    with Store.open(store_path, settings=_settings()) as store:
        # What the background indexer does after captures in a default store
        # (this bench's store has no embedder, so no indexer): merge the FTS5
        # segments the build left. Nothing to do on a reused, tidied store.
        tidy_steps = fts_tidy.tidy(store.internals.db)
        if per_user >= postings.MIN_DOCS:
            # Large users are ranked from in-memory postings, which load in a
            # thread on their first search (SQL answers meanwhile): load them.
            for user in sorted(set(targets)):
                store.search_conversations(user, "warm-up", strategy="keyword")
            store.internals.search_engine.hot_postings.wait()
        for q, user in zip(qs, targets, strict=True):
            t0, c0 = time.perf_counter(), time.thread_time()
            store.search_conversations(user, q, limit=_TOP, strategy="keyword")
            times["keyword"].append((time.perf_counter() - t0) * 1000)
            # CPU time of the same call: on a shared machine the wall time
            # also counts the time other processes held the core.
            times["keyword_cpu"].append((time.thread_time() - c0) * 1000)
            with store.internals.db.read() as conn:
                raw = conn.connection.driver_connection
                assert raw is not None
                span = user_fts_range(conn, user)
                match = build_match(q)
                t0 = time.perf_counter()
                mine = bm25.keyword_messages(conn, q, user, _TOP)
                times["ranking"].append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                ref: list[Any] = []
                if span is not None and match is not None:
                    ref = raw.execute(
                        "SELECT rowid - ?, bm25(l0_fts, 1.0, 1.0, 1.0) AS s FROM l0_fts "
                        "WHERE l0_fts MATCH ? AND rowid BETWEEN ? AND ? ORDER BY s, rowid LIMIT ?",
                        (span[0], match, span[0], span[1], _TOP),
                    ).fetchall()
                times["ref_fts5_same_user"].append((time.perf_counter() - t0) * 1000)
            identical += [i for i, _ in mine] == [int(i) for i, _ in ref]
            exact += [s for _, s in mine] == [float(s) for _, s in ref]
            want = {int(i) for i, _ in ref}
            overlap += len(want & {i for i, _ in mine}) / max(len(want), 1)
    return {
        "users": users,
        "per_user": per_user,
        "messages": users * per_user,
        "queries": len(qs),
        "build_s": built,
        "fts_tidy_steps": tidy_steps,
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        **{name: stats(ms) for name, ms in times.items()},
        "same_top10_as_bm25": identical,
        "same_scores_as_bm25": exact,
        "mean_overlap_at_10": overlap / max(len(qs), 1),
    }


def format_keyword_bench(res: dict[str, Any]) -> str:
    def row(name: str, label: str) -> str:
        s = res[name]
        return f"  {label:<44} p50 {s['p50_ms']:8.3f} ms   p95 {s['p95_ms']:8.3f} ms"

    n = res["queries"]
    return "\n".join(
        [
            f"keyword search, {res['users']} users x {res['per_user']:,} messages "
            f"({res['messages']:,}), {n} queries",
            row("keyword", "search_conversations(strategy='keyword')"),
            row("keyword_cpu", "  same calls, CPU time of the thread"),
            row("ranking", "  per-user BM25 ranking alone"),
            row("ref_fts5_same_user", "  ref FTS5 MATCH + bm25(), same user's rows"),
            f"  top {_TOP} identical to bm25(): {res['same_top10_as_bm25']}/{n} "
            f"(scores too: {res['same_scores_as_bm25']}/{n}), "
            f"mean overlap {res['mean_overlap_at_10']:.3f}",
            f"  FTS5 merge steps before timing: {res['fts_tidy_steps']}; load average before "
            f"{res['loadavg_before']}, after {res['loadavg_after']}",
        ]
    )
