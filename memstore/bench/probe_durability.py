"""SQLite and PostgreSQL at the same durability: capture, keyword search and
reindex on one small store of conversation-like text per configuration.

Four configurations, each on a fresh store, all open at once in one run:

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
same durability (SQLite's ``sqlite3``, PostgreSQL's ``psycopg``). Captures,
searches and raw commits are interleaved across the four stores in blocks
of 20 (each block goes to all four, in a rotating order), so the ratios
hold on a machine whose speed drifts between seconds; measured one
configuration after another, SQLite's own capture p50 moved 2.9× between
rounds on this VM.

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
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from memstore.bench.capture_search import stats
from memstore.bench.chattext import ChatText
from memstore.bench.keyword import chat_queries
from memstore.bench.scale_db import fresh_pg
from memstore.config import Settings
from memstore.errors import MemstoreError
from memstore.store import Store

_USERS = 5
_T = TypeVar("_T")
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


class _Floor:
    """The floor of one capture: one row inserted and committed alone on a
    bare connection at the configuration's durability, in a table of its
    own beside the store's."""

    def __init__(self, config: str, where: str) -> None:
        self.sqlite = config.startswith("sqlite")
        if self.sqlite:
            self.conn: Any = sqlite3.connect(where, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode = WAL")
            sync = "FULL" if config == "sqlite-full" else "NORMAL"
            self.conn.execute(f"PRAGMA synchronous = {sync}")
            self.conn.execute("CREATE TABLE raw_floor (id INTEGER PRIMARY KEY, body TEXT)")
            return
        import psycopg

        self.conn = psycopg.connect(where.replace("postgresql+psycopg://", "postgresql://", 1))
        self.conn.execute("CREATE TABLE raw_floor (id BIGSERIAL PRIMARY KEY, body TEXT)")
        self.conn.commit()

    def commit_one(self, body: str) -> float:
        t0 = time.perf_counter()
        if self.sqlite:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute("INSERT INTO raw_floor (body) VALUES (?)", (body,))
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("INSERT INTO raw_floor (body) VALUES (%s)", (body,))
            self.conn.commit()
        return (time.perf_counter() - t0) * 1000

    def close(self) -> None:
        self.conn.close()


# Turns (queries, raw commits) a store gets before the next store's turn:
# few enough that a drift of the machine's speed reaches every store alike,
# enough that each store runs with its caches warm (one turn at a time made
# SQLite's capture ~40% slower than a store measured alone).
_BLOCK = 20


def _blocks(items: list[_T]) -> list[list[_T]]:
    return [items[i : i + _BLOCK] for i in range(0, len(items), _BLOCK)]


def _settings(config: str) -> Settings:
    return Settings().replace(
        embedder="hashing",
        background_indexer=False,
        scheduler=False,
        durability="full" if config == "sqlite-full" else "normal",
    )


def measure_all(
    configs: Sequence[str], url: str, turns: int, n_queries: int
) -> list[dict[str, Any]]:
    """Every figure of every configuration, interleaved: each block of
    ``_BLOCK`` turns is captured into every store in turn (the order
    rotating from block to block), and so are the queries and the raw
    commits, so a machine whose speed drifts slows every configuration
    alike. Reindex is one call per store, one store after another."""
    gen = ChatText(3)
    texts = [gen.turn() for _ in range(turns)]
    capture: dict[str, list[float]] = {c: [] for c in configs}
    search: dict[str, list[float]] = {c: [] for c in configs}
    raw: dict[str, list[float]] = {c: [] for c in configs}
    reindex: dict[str, tuple[int, float]] = {}

    def rotated(i: int) -> list[str]:
        k = i % len(configs)
        return [*configs[k:], *configs[:k]]

    with ExitStack() as stack:
        wheres = {c: stack.enter_context(_where(c, url)) for c in configs}
        stores = {
            c: stack.enter_context(Store.open(wheres[c], settings=_settings(c))) for c in configs
        }
        for b, turns_ in enumerate(_blocks(list(enumerate(texts)))):
            for c in rotated(b):
                for i, (user_text, reply) in turns_:
                    user, session = f"u{i % _USERS}", f"s{i // (_USERS * 10)}"
                    t0 = time.perf_counter()
                    stores[c].capture_turn(user, session, user_text, reply)
                    capture[c].append((time.perf_counter() - t0) * 1000)
        rng = random.Random(5)
        asked = [(f"u{rng.randrange(_USERS)}", q) for q in chat_queries(n_queries)]
        for b, queries in enumerate(_blocks(asked)):
            for c in rotated(b):
                for user, q in queries:
                    t0 = time.perf_counter()
                    stores[c].search_conversations(user, q, limit=10, strategy="keyword")
                    search[c].append((time.perf_counter() - t0) * 1000)
        for c in configs:
            t0 = time.perf_counter()
            done = stores[c].reindex()
            reindex[c] = (done, time.perf_counter() - t0)
        floors = {c: _Floor(c, wheres[c]) for c in configs}
        try:
            for b, bodies in enumerate(_blocks([u for u, _ in texts])):
                for c in rotated(b):
                    raw[c].extend(floors[c].commit_one(body) for body in bodies)
        finally:
            for floor in floors.values():
                floor.close()
    return [
        {
            "config": c,
            "capture_turn": stats(capture[c]),
            "keyword": stats(search[c]),
            "raw_commit": stats(raw[c]),
            "reindexed": reindex[c][0],
            "reindex_per_s": reindex[c][0] / reindex[c][1] if reindex[c][1] else 0.0,
        }
        for c in configs
    ]


def measure(config: str, url: str, turns: int, n_queries: int) -> dict[str, Any]:
    """The figures of one configuration alone."""
    return measure_all([config], url, turns, n_queries)[0]


def main(argv: list[str]) -> None:
    usage = "usage: memstore bench durability URL [TURNS] [QUERIES]"
    if not argv or len(argv) > 3:
        raise SystemExit(usage)
    url = argv[0]
    try:
        turns = int(argv[1]) if len(argv) > 1 else 400
        n_queries = int(argv[2]) if len(argv) > 2 else 200
    except ValueError:
        raise SystemExit(f"TURNS and QUERIES are whole numbers; {usage}") from None
    if turns < 1 or n_queries < 1:
        raise SystemExit(f"TURNS and QUERIES must be at least 1; {usage}")
    import psycopg
    from sqlalchemy.exc import SQLAlchemyError

    load = os.getloadavg()
    try:
        rows = measure_all(CONFIGS, url, turns, n_queries)
    except (psycopg.Error, SQLAlchemyError, MemstoreError) as e:
        # The server is unreachable or refuses: one line, not a traceback.
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SystemExit(f"PostgreSQL at {url}: {first}") from None
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
