"""``bench scale --db URL``: the same figures on SQLite and PostgreSQL, side by side.

One store per backend (a temporary SQLite file; a fresh database created on
the URL's server and dropped afterwards), filled the same way through the
public API, measured by the same code:

- one store holds both layouts: ``users`` users of ``per_user`` messages
  each, and one user of ``big`` messages (sessions of 20, 20 per capture);
- fill rate (captures of 20 messages) and reindex rows/s (the hashing
  embedder; the background indexer is off during the fill, so reindex embeds
  everything);
- capture_turn p50/p99 with the background indexer on (the defaults);
- hybrid search L0 p50/p95 (query embedding included) for a random small
  user and for the big one;
- rebuild events/s (replay of the whole log);
- bytes per message: the database's growth over the fill and reindex (events,
  projections, full-text index, vectors, indexes) divided by the messages;
  SQLite: the file after a WAL checkpoint; PostgreSQL: ``pg_database_size``;
- derivation: captured sessions of distinct users run through the pipeline
  with the offline rule-based deriver, in this one process (messages/s).

Latency is noisy on a shared machine: the load average is recorded before
and after, and only figures of the same run compare.
"""

from __future__ import annotations

import math
import os
import random
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import text

from memstore.bench.capture_search import _stats, queries, text_pool
from memstore.bench.scale import _checkpointed_mb
from memstore.config import Settings
from memstore.db.target import parse, safe_url
from memstore.store import Store

SESSION = 20


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


@contextmanager
def fresh_pg(url: str) -> Iterator[str]:
    """A new database on the URL's server (its user needs CREATEDB), dropped after."""
    import psycopg

    admin = url.replace("postgresql+psycopg://", "postgresql://", 1)
    name = f"memstore_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{url.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _size_bytes(store: Store, where: str) -> int:
    if store.db.dialect == "postgresql":
        with store.db.read() as conn:
            return int(
                conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            )
    return int(_checkpointed_mb(Path(where)) * 1e6)


def _fill(store: Store, user: str, count: int, pool: list[str], offset: int) -> None:
    for s, i in enumerate(range(0, count, SESSION)):
        msgs = [
            {
                "role": "user" if j % 2 == 0 else "assistant",
                "content": pool[(offset + i + j) % len(pool)],
                "id": f"m{i + j}",
            }
            for j in range(min(SESSION, count - i))
        ]
        store.capture(user, f"s{s}", msgs)


def _timed(fn: Callable[[], object], n: int) -> dict[str, float]:
    ms: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1000)
    return _stats(ms)


def measure(
    where: str, *, users: int, per_user: int, big: int, turns: int, n_queries: int, sessions: int
) -> dict[str, Any]:
    """Every figure for one store (``where``: a file path or a URL)."""
    res: dict[str, Any] = {"load_before": _loadavg()}
    pool = text_pool(5000, seed=7)
    quiet = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(where, settings=quiet) as store:
        empty = _size_bytes(store, where)
        t0 = time.perf_counter()
        for u in range(users):
            _fill(store, f"u{u:03d}", per_user, pool, u * per_user)
        if big:
            _fill(store, "big", big, pool, 0)
        messages = users * per_user + big
        res["fill_per_s"] = messages / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        rows = store.reindex()
        res["reindex_per_s"] = rows / (time.perf_counter() - t0)
        res["bytes_per_message"] = (_size_bytes(store, where) - empty) / messages
        res["messages"] = messages
    live = quiet.replace(background_indexer=True)
    with Store.open(where, settings=live) as store:
        rng = random.Random(3)
        n = iter(range(10**9))
        res["capture"] = _timed(
            lambda: store.capture_turn(
                f"u{rng.randrange(max(users, 1)):03d}", "live", f"live turn {next(n)}", "ok"
            ),
            turns,
        )
        store.parts.stop_background()
        store.reindex()
        qs = iter(queries(2 * n_queries))
        if users:
            res["hybrid_small"] = _timed(
                lambda: store.search_conversations(
                    next(qs), user_id=f"u{rng.randrange(users):03d}", limit=10
                ),
                n_queries,
            )
        if big:
            store.search_conversations("warm-up", user_id="big")  # loads the in-memory copy
            res["hybrid_big"] = _timed(
                lambda: store.search_conversations(next(qs), user_id="big", limit=10), n_queries
            )
        t0 = time.perf_counter()
        events = store.rebuild()
        res["rebuild_events_per_s"] = events / (time.perf_counter() - t0)
    res["derive"] = _derive(where, sessions, pool)
    res["load_after"] = _loadavg()
    return res


def _derive(where: str, sessions: int, pool: list[str]) -> dict[str, float]:
    """Sessions of distinct new users derived by the pipeline, one process."""
    settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(where, settings=settings) as store:
        for s in range(sessions):
            _fill(store, f"d{s:03d}", SESSION, pool, 97 * s)
        svc = store.pipeline
        assert svc is not None
        # Per user: the filled users' sessions are pending too, not timed here.
        t0 = time.perf_counter()
        outcomes = [o for s in range(sessions) for o in svc.run_pipeline(f"d{s:03d}", wait=True)]
        took = time.perf_counter() - t0
        with store.db.read() as conn:
            memories = int(
                conn.execute(
                    text("SELECT count(*) FROM l1_memories WHERE user_id LIKE 'd%'")
                ).scalar_one()
            )
    return {
        "sessions": sessions,
        "runs": len(outcomes),
        "failed": sum(1 for o in outcomes if not o.ok),
        "messages_per_s": sessions * SESSION / took if took else math.nan,
        "memories": memories,
    }


def run_backends(
    url: str,
    *,
    users: int = 100,
    per_user: int = 1000,
    big: int = 100_000,
    turns: int = 500,
    n_queries: int = 200,
    sessions: int = 40,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    target = parse(url)
    if target.url is None:
        raise ValueError("bench scale --db takes a PostgreSQL URL (SQLite runs beside it)")
    kw = {
        "users": users,
        "per_user": per_user,
        "big": big,
        "turns": turns,
        "n_queries": n_queries,
        "sessions": sessions,
    }
    res: dict[str, Any] = {"server": safe_url(target.url), **kw, "backends": {}}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        log("sqlite: fill, reindex, capture, search, rebuild, derive")
        res["backends"]["sqlite"] = measure(os.path.join(tmp, "scale.db"), **kw)
    with fresh_pg(target.url) as pg:
        log("postgresql: fill, reindex, capture, search, rebuild, derive")
        res["backends"]["postgresql"] = measure(pg, **kw)
        res["scratch_database"] = pg.rpartition("/")[2]
    return res


_ROWS: tuple[tuple[str, str, str], ...] = (
    ("fill_per_s", "", "fill, messages/s (captures of 20)"),
    ("reindex_per_s", "", "reindex, rows/s (hashing)"),
    ("capture", "p50_ms", "capture_turn p50 ms (indexer on)"),
    ("capture", "p99_ms", "capture_turn p99 ms"),
    ("hybrid_small", "p50_ms", "hybrid L0 p50 ms, {per_user}-msg user"),
    ("hybrid_small", "p95_ms", "hybrid L0 p95 ms, {per_user}-msg user"),
    ("hybrid_big", "p50_ms", "hybrid L0 p50 ms, {big}-msg user"),
    ("hybrid_big", "p95_ms", "hybrid L0 p95 ms, {big}-msg user"),
    ("rebuild_events_per_s", "", "rebuild, events/s"),
    ("bytes_per_message", "", "bytes per message"),
    ("derive", "messages_per_s", "derivation, messages/s (1 process)"),
)


def format_backends(res: dict[str, Any]) -> str:
    sq, pg = res["backends"]["sqlite"], res["backends"]["postgresql"]
    lines = [
        f"one store per backend: {res['users']} users x {res['per_user']} messages + 1 user x "
        f"{res['big']}; hashing embedder; {res['n_queries']} queries, {res['turns']} capture "
        f"turns, {res['sessions']} derived sessions; PostgreSQL at {res['server']}",
        f"load average: sqlite {sq['load_before']} -> {sq['load_after']}; "
        f"postgresql {pg['load_before']} -> {pg['load_after']}",
        "",
        f"| {'figure':<40} | {'SQLite':>10} | {'PostgreSQL':>10} | {'PG / SQLite':>11} |",
        f"|{'-' * 42}|{'-' * 12}:|{'-' * 12}:|{'-' * 13}:|".replace("-:", ":"),
    ]
    for key, sub, label in _ROWS:
        a, b = (_get(r, key, sub) for r in (sq, pg))
        if a is None and b is None:
            continue
        ratio = f"{b / a:.2f}x" if a and b and not math.isnan(a) and not math.isnan(b) else "-"
        name = label.format(per_user=res["per_user"], big=res["big"])
        lines.append(f"| {name:<40} | {_num(a):>10} | {_num(b):>10} | {ratio:>11} |")
    return "\n".join(lines)


def _get(r: dict[str, Any], key: str, sub: str) -> float | None:
    v = r.get(key)
    if isinstance(v, dict):
        v = v.get(sub)
    return None if v is None else float(v)


def _num(v: float | None) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}"
