"""SQLite and PostgreSQL at the same durability: capture, keyword search and
reindex on one small store of conversation-like text per configuration.

Four configurations, each on a fresh store, one after another in one run:

- SQLite ``durability="normal"`` (WAL, ``synchronous=NORMAL``: a capture
  survives a process crash; the last commits may roll back on power loss);
- SQLite ``durability="full"`` (``synchronous=FULL``: every commit syncs the
  WAL, survives power loss);
- PostgreSQL ``synchronous_commit=on`` (every commit waits for its WAL flush:
  the durability of SQLite ``full``);
- PostgreSQL ``synchronous_commit=off`` (commits return before the flush; a
  crash of the server may lose the last ~0.6 s, never corrupting: the closest
  to SQLite ``normal``), set on the probe's own database only.

Per configuration: ``capture_turn`` one turn per call (users round-robin,
the hashing embedder with the background indexer off, so capture is
measured alone), then ``search_conversations(strategy="keyword")`` for
queries over the same vocabulary, then ``reindex()`` of every message
(hashing vectors), as messages per second; last, the floor of a capture:
each user text inserted and committed alone on a bare connection at the
same durability (SQLite's ``sqlite3``, PostgreSQL's ``psycopg``).

Usage: memstore bench durability URL [TURNS] [QUERIES]
URL: a PostgreSQL server whose user may create databases (one is created
and dropped per PostgreSQL configuration).
"""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memstore.bench.capture_search import stats
from memstore.bench.chattext import ChatText
from memstore.bench.keyword import chat_queries
from memstore.bench.scale_db import fresh_pg
from memstore.config import Settings
from memstore.store import Store

_USERS = 5
CONFIGS = ("sqlite-normal", "sqlite-full", "pg-sync-on", "pg-sync-off")


def _admin(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
        conn.autocommit = True
        conn.execute(sql)


@contextmanager
def _where(config: str, url: str) -> Iterator[str]:
    if config.startswith("sqlite"):
        with tempfile.TemporaryDirectory(prefix="durability-") as tmp:
            yield str(Path(tmp) / "store.db")
        return
    with fresh_pg(url) as db_url:
        setting = "on" if config == "pg-sync-on" else "off"
        name = db_url.rpartition("/")[2]
        _admin(url, f'ALTER DATABASE "{name}" SET synchronous_commit = {setting}')
        yield db_url


def _raw_commits(config: str, where: str, texts: list[str]) -> list[float]:
    """The floor of one capture: one row of each text inserted and committed
    alone on a bare connection at the configuration's durability, in a
    table of its own beside the store's."""
    ms: list[float] = []
    if config.startswith("sqlite"):
        conn = sqlite3.connect(where, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {'FULL' if config == 'sqlite-full' else 'NORMAL'}")
        conn.execute("CREATE TABLE raw_floor (id INTEGER PRIMARY KEY, body TEXT)")
        for body in texts:
            t0 = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO raw_floor (body) VALUES (?)", (body,))
            conn.execute("COMMIT")
            ms.append((time.perf_counter() - t0) * 1000)
        conn.close()
        return ms
    import psycopg

    with psycopg.connect(where.replace("postgresql+psycopg://", "postgresql://", 1)) as pg:
        pg.execute("CREATE TABLE raw_floor (id BIGSERIAL PRIMARY KEY, body TEXT)")
        pg.commit()
        for body in texts:
            t0 = time.perf_counter()
            pg.execute("INSERT INTO raw_floor (body) VALUES (%s)", (body,))
            pg.commit()
            ms.append((time.perf_counter() - t0) * 1000)
    return ms


def measure(config: str, url: str, turns: int, n_queries: int) -> dict[str, Any]:
    settings = Settings().replace(
        embedder="hashing",
        background_indexer=False,
        scheduler=False,
        durability="full" if config == "sqlite-full" else "normal",
    )
    gen = ChatText(3)
    texts = [gen.turn() for _ in range(turns)]
    capture: list[float] = []
    search: list[float] = []
    with _where(config, url) as where, Store.open(where, settings=settings) as store:
        for i, (user_text, reply) in enumerate(texts):
            user = f"u{i % _USERS}"
            t0 = time.perf_counter()
            store.capture_turn(user, f"s{i // (_USERS * 10)}", user_text, reply)
            capture.append((time.perf_counter() - t0) * 1000)
        rng = random.Random(5)
        for q in chat_queries(n_queries):
            user = f"u{rng.randrange(_USERS)}"
            t0 = time.perf_counter()
            store.search_conversations(user, q, limit=10, strategy="keyword")
            search.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        done = store.reindex()
        reindex_s = time.perf_counter() - t0
        raw = _raw_commits(config, where, [u for u, _ in texts])
    return {
        "config": config,
        "capture_turn": stats(capture),
        "keyword": stats(search),
        "raw_commit": stats(raw),
        "reindexed": done,
        "reindex_per_s": done / reindex_s if reindex_s else 0.0,
    }


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: memstore bench durability URL [TURNS] [QUERIES]")
    url = argv[0]
    turns = int(argv[1]) if len(argv) > 1 else 400
    n_queries = int(argv[2]) if len(argv) > 2 else 200
    load = os.getloadavg()
    rows = [measure(c, url, turns, n_queries) for c in CONFIGS]
    print(f"{turns} turns ({2 * turns} messages) of {_USERS} users, {n_queries} keyword queries")
    print(
        f"{'':<16}{'capture p50/p99 ms':>22}{'raw commit p50 ms':>19}"
        f"{'keyword p50/p95 ms':>22}{'reindex msg/s':>16}"
    )
    for r in rows:
        c, k = r["capture_turn"], r["keyword"]
        print(
            f"{r['config']:<16}{c['p50_ms']:>10.2f} / {c['p99_ms']:<9.2f}"
            f"{r['raw_commit']['p50_ms']:>12.2f}      "
            f"{k['p50_ms']:>10.2f} / {k['p95_ms']:<9.2f}{r['reindex_per_s']:>14.0f}"
        )
    by = {r["config"]: r for r in rows}
    for pg, lite in (("pg-sync-on", "sqlite-full"), ("pg-sync-off", "sqlite-normal")):
        a, b = by[pg], by[lite]
        print(
            f"{pg} / {lite}: capture p50 "
            f"{a['capture_turn']['p50_ms'] / b['capture_turn']['p50_ms']:.2f}x, keyword p95 "
            f"{a['keyword']['p95_ms'] / b['keyword']['p95_ms']:.2f}x, reindex time "
            f"{b['reindex_per_s'] / a['reindex_per_s']:.2f}x"
        )
    print(f"load average {load} -> {os.getloadavg()}")
