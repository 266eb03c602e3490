"""``bench scale --db URL``: the same figures on SQLite and PostgreSQL, side by side.

One store per layout and backend (a SQLite file; a database created on the
URL's server), each layout ``USERSxMESSAGES`` in its own store (the two
measured: 100 users x 1k messages, and one user x 100k, who is then the store's
only user, as a single-user host's is). Built once, measured on a copy:

- **build**: the conversations (sessions of 20 messages,
  texts from a pool) go in through ``bulk_capture``: the very ``l0.captured``
  events ``Store.capture`` appends, prepared by the same code, 50 captures per
  transaction (what capture does per call, duplicate look-up included;
  only the commit is shared).
  Then ``reindex`` embeds every row; the embedder is wrapped so each distinct
  text is embedded once (context vectors repeat as the sessions cycle the
  pool); every stored vector is still the model's vector of that row's text.
  With ``keep`` the built store is kept (SQLite: a file; PostgreSQL: a
  template database) and reused while the layout, embedder and schema head
  are the same; each run measures on a copy.
- **measured on the copy**, defaults (indexer on, context vectors on;
  derivation scheduler off, no LLM):

  ==============================  ==========================================
  figure                          reference in the same run
  ==============================  ==========================================
  capture_turn p50/p99,           capture_turn with the indexer stopped
    indexer working
  hybrid L0 p50/p95               numpy cosine over the same user's vectors
    (query embedding included)    (read back from the store); the query
                                  embedding alone
  keyword L0 p50/p95              SQLite: FTS5 MATCH + bm25 over the same
                                  user's rows
  rebuild events/s                reading + decoding the log (``read_events``)
  bytes per message               (the growth over the build, per message)
  ==============================  ==========================================

- derivation (first layout only): sessions of distinct new users run through
  the pipeline with the offline rule-based deriver, in this one process.

Latency is noisy on a shared machine: the load average is recorded before
and after each store, and only figures of the same run compare.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, text

from memstore.bench.capture_search import queries, stats, text_pool, time_fts5, time_numpy_topk
from memstore.bench.recall_scale import MemoEmbedder
from memstore.bench.scale import checkpointed_mb
from memstore.config import Settings
from memstore.db.migrate import head_revision
from memstore.db.target import parse, safe_url
from memstore.derive.messages.capture import (
    PreparedMessage,
    capture_event,
    known_message_ids,
    new_messages,
    prepare_messages,
)
from memstore.events.log import NewEvent
from memstore.store import Store
from memstore.vectors.hot import partition_vectors

SESSION = 20
PER_TRANSACTION = 50
# Distinct texts the conversations cycle through; e5 embeds each distinct
# (previous + this) pair once, so its pool is smaller (as in ``bench scale``).
POOLS = {"hashing": 5000, "e5": 1500}
# Bump when the build changes what it stores (a kept store is then rebuilt).
BUILD_VERSION = 1


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


@dataclass(frozen=True)
class Layout:
    users: int
    per_user: int

    @property
    def messages(self) -> int:
        return self.users * self.per_user

    @property
    def label(self) -> str:
        return f"{self.users}x{self.per_user}"

    def user(self, i: int) -> str:
        return f"u{i:04d}"


def parse_layouts(spec: str) -> list[Layout]:
    """``100x1000,1x100000``; a bare number N means one user of N messages."""
    out: list[Layout] = []
    for part in spec.split(","):
        users, x, per = part.strip().partition("x")
        if not x:
            users, per = "1", users
        if not (users.isdigit() and per.isdigit() and int(users) > 0 and int(per) > 0):
            raise ValueError(f"{part!r}: expected USERSxMESSAGES or MESSAGES")
        out.append(Layout(int(users), int(per)))
    return out


@contextmanager
def fresh_pg(url: str, template: str | None = None) -> Iterator[str]:
    """A new database on the URL's server (its user needs CREATEDB), dropped
    after; a copy of ``template`` when given."""
    name = f"memstore_bench_{uuid.uuid4().hex[:10]}"
    _pg_admin(url, f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield _pg_url(url, name)
    finally:
        _pg_admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _pg_url(url: str, name: str) -> str:
    return f"{url.rpartition('/')[0]}/{name}"


def _pg_admin(url: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    admin = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        cur = conn.execute(sql)
        return list(cur.fetchall()) if cur.description else []


def calls(layout: Layout, pool: Sequence[str]) -> Iterator[tuple[str, str, list[dict[str, Any]]]]:
    """(user, session, messages): each user's messages in sessions of 20,
    a window of the pool that starts where the previous user's ended, one
    message a minute (fixed timestamps: two fills store the same events)."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    for u in range(layout.users):
        offset = u * layout.per_user
        for s, i in enumerate(range(0, layout.per_user, SESSION)):
            msgs = [
                {
                    "role": "user" if j % 2 == 0 else "assistant",
                    "content": pool[(offset + i + j) % len(pool)],
                    "id": f"m{i + j}",
                    "timestamp": start + timedelta(minutes=i + j),
                }
                for j in range(min(SESSION, layout.per_user - i))
            ]
            yield layout.user(u), f"s{s}", msgs


def bulk_capture(
    store: Store,
    items: Iterator[tuple[str, str, list[dict[str, Any]]]],
    per_transaction: int = PER_TRANSACTION,
) -> int:
    """Append the ``l0.captured`` events ``Store.capture`` would, several
    captures per write transaction; returns the messages stored.

    Each capture is what ``l0.capture.capture`` does (the same preparation,
    the same look-up of the messages the session already has, inside the
    write transaction); only the commit is shared."""
    max_bytes = store.settings.storage.max_message_bytes
    stored = 0
    batch: list[tuple[str, str, list[PreparedMessage]]] = []

    def build(conn: Connection) -> list[NewEvent]:
        nonlocal stored
        events: list[NewEvent] = []
        seen: dict[tuple[str, str], set[str]] = {}
        for user, session, prepared in batch:
            known = seen.setdefault((user, session), set())
            known |= known_message_ids(conn, user, session, [m.id for m in prepared])
            fresh = new_messages(prepared, known)
            known.update(m.id for m in fresh)
            if fresh:
                events.append(capture_event(user, session, None, fresh))
                stored += len(fresh)
        return events

    for user, session, msgs in items:
        prepared = prepare_messages(
            session, msgs, now=store.internals.kernel.clock(), max_bytes=max_bytes
        )
        batch.append((user, session, prepared))
        if len(batch) >= per_transaction:
            store.internals.kernel.append_if(build)
            batch = []
    if batch:
        store.internals.kernel.append_if(build)
    return stored


def _size_bytes(store: Store, where: str) -> int:
    return store.internals.db.backend.size_bytes(store.internals.db)


def build(where: str, layout: Layout, embedder: str) -> dict[str, Any]:
    """Fill and embed one store; the build's own figures."""
    pool = text_pool(POOLS[embedder], seed=7)
    quiet = Settings().replace(embedder=embedder, scheduler=False, background_indexer=False)
    res: dict[str, Any] = {"load_before": _loadavg(), "messages": layout.messages}
    res["pool"] = len(pool)
    t_build = time.perf_counter()
    with Store.open(where, settings=quiet) as store:
        empty = _size_bytes(store, where)
        t0 = time.perf_counter()
        stored = bulk_capture(store, calls(layout, pool))
        if stored != layout.messages:
            raise RuntimeError(f"bulk fill stored {stored} of {layout.messages} messages")
        res["fill_per_s"] = stored / (time.perf_counter() - t0)
        assert store.internals.indexer is not None
        memo = MemoEmbedder(store.internals.indexer.embedder)
        store.internals.indexer.embedder = memo
        t0 = time.perf_counter()
        rows = store.reindex()
        took = time.perf_counter() - t0
        res["reindex"] = {"rows": rows, "distinct_embedded": memo.embedded, "s": took}
        res["reindex_per_s"] = rows / took if took else math.nan
        res["bytes_per_message"] = (_size_bytes(store, where) - empty) / layout.messages
    res["build_s"] = time.perf_counter() - t_build
    res["load_after"] = _loadavg()
    return res


class _Kept:
    """Built stores kept under ``root`` and reused while their key matches."""

    def __init__(self, root: Path, url: str | None) -> None:
        self.root = root
        self.url = url
        root.mkdir(parents=True, exist_ok=True)

    def key(self, backend: str, layout: Layout, embedder: str) -> str:
        shape = [BUILD_VERSION, backend, layout.label, embedder, POOLS[embedder], head_revision()]
        return hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:12]

    def record(self, key: str) -> Path:
        return self.root / f"scale-{key}.json"

    def get(self, backend: str, key: str) -> dict[str, Any] | None:
        rec = self.record(key)
        if not rec.exists():
            return None
        if backend == "sqlite":
            return json.loads(rec.read_text()) if (self.root / f"scale-{key}.db").exists() else None
        assert self.url is not None
        found = _pg_admin(self.url, f"SELECT 1 FROM pg_database WHERE datname = 'scale_{key}'")
        return json.loads(rec.read_text()) if found else None


def _built(
    backend: str, layout: Layout, embedder: str, kept: _Kept | None, url: str | None, tmp: str
) -> tuple[dict[str, Any], str]:
    """(build record, where the built store is): kept and reused, or new."""
    if kept is not None:
        key = kept.key(backend, layout, embedder)
        got = kept.get(backend, key)
        if got is not None:
            return {**got, "reused": True}, key
    if backend == "sqlite":
        path = os.path.join(tmp, f"built-{layout.label}.db")
        rec = build(path, layout, embedder)
        if kept is not None:
            checkpointed_mb(Path(path))
            shutil.move(path, kept.root / f"scale-{key}.db")
            kept.record(key).write_text(json.dumps(rec))
            return rec, key
        return rec, path
    assert url is not None
    name = f"scale_{key}" if kept is not None else f"memstore_bench_{uuid.uuid4().hex[:10]}"
    _pg_admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _pg_admin(url, f'CREATE DATABASE "{name}"')
    rec = build(_pg_url(url, name), layout, embedder)
    if kept is not None:
        kept.record(key).write_text(json.dumps(rec))
        return rec, key
    return rec, name


@contextmanager
def _copy(backend: str, built: str, kept: _Kept | None, url: str | None, tmp: str) -> Iterator[str]:
    """A scratch copy of the built store (the measurements write to it)."""
    if backend == "sqlite":
        src = kept.root / f"scale-{built}.db" if kept is not None else Path(built)
        dst = os.path.join(tmp, "measured.db")
        shutil.copyfile(src, dst)
        try:
            yield dst
        finally:
            for suffix in ("", "-wal", "-shm", "-lock"):
                Path(dst + suffix).unlink(missing_ok=True)
        return
    assert url is not None
    template = f"scale_{built}" if kept is not None else built
    try:
        with fresh_pg(url, template) as where:
            yield where
    finally:
        if kept is None:
            _pg_admin(url, f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')


def _timed(fn: Callable[[], object], n: int) -> dict[str, float]:
    ms: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1000)
    return stats(ms)


def measure(
    where: str, layout: Layout, *, embedder: str, turns: int, n_queries: int
) -> dict[str, Any]:
    """Every latency figure for one built store (``where``: a path or a URL)."""
    res: dict[str, Any] = {"load_before": _loadavg()}
    rng = random.Random(3)
    live = Settings().replace(embedder=embedder, scheduler=False)
    with Store.open(where, settings=live) as store:
        n = iter(range(10**9))

        def turn(tag: str) -> Callable[[], object]:
            return lambda: store.capture_turn(
                layout.user(rng.randrange(layout.users)), tag, f"{tag} turn {next(n)}", "ok"
            )

        res["capture"] = _timed(turn("live"), turns)
        store.internals.stop_background()
        res["capture_idle"] = _timed(turn("idle"), turns)
        store.reindex()  # the live turns: search sees an idle, complete index
        res |= _search(store, layout, n_queries)
        t0 = time.perf_counter()
        events = store.rebuild()
        res["rebuild_events_per_s"] = events / (time.perf_counter() - t0)
        res["rebuild_events"] = events
        t0 = time.perf_counter()
        read = _read_all(store)
        res["ref_read_decode_per_s"] = read / (time.perf_counter() - t0)
    res["load_after"] = _loadavg()
    return res


def _read_all(store: Store) -> int:
    after, n = 0, 0
    while batch := store.read_events(after=after, limit=5000):
        after, n = batch[-1].position, n + len(batch)
    return n


def _search(store: Store, layout: Layout, n_queries: int) -> dict[str, Any]:
    assert store.internals.embedder is not None
    qs = queries(n_queries)
    rng = random.Random(5)
    users = [layout.user(rng.randrange(layout.users)) for _ in qs]
    # Loads a large user's in-memory copy (its first search) and e5's model.
    store.search_conversations(users[0], "warm-up", limit=10)
    # And a large user's keyword postings, which load in a thread meanwhile.
    store.internals.search_engine.hot_postings.wait()
    out: dict[str, Any] = {}
    hybrid: list[float] = []
    keyword: list[float] = []
    embed: list[float] = []
    for q, u in zip(qs, users, strict=True):
        store.internals.search_engine.queries.cache.clear()  # time the query embedding
        t0 = time.perf_counter()
        store.search_conversations(u, q, limit=10)
        t1 = time.perf_counter()
        store.search_conversations(u, q, limit=10, strategy="keyword")
        t2 = time.perf_counter()
        store.internals.embedder.embed_query(q)
        t3 = time.perf_counter()
        hybrid.append((t1 - t0) * 1000)
        keyword.append((t2 - t1) * 1000)
        embed.append((t3 - t2) * 1000)
    out["hybrid"] = stats(hybrid)
    out["keyword"] = stats(keyword)
    out["ref_query_embedding"] = stats(embed)
    with store.internals.db.read() as conn:
        sp = store.internals.search_engine.space(conn, "l0")
        assert sp is not None
        mats = {u: partition_vectors(conn, sp, u)[1] for u in set(users)}
    qvecs = [store.internals.embedder.embed_query(q) for q in qs]
    out["ref_numpy_cosine"] = time_numpy_topk([mats[u] for u in users], qvecs, 10)
    if store.internals.db.backend.keyword_index == "fts5":
        out["ref_fts5_alone"] = time_fts5(store, qs, users, 10)
    return out


def _derive(where: str, sessions: int) -> dict[str, float]:
    """Sessions of distinct new users derived by the pipeline, one process."""
    pool = text_pool(POOLS["hashing"], seed=7)
    settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(where, settings=settings) as store:
        for s in range(sessions):
            msgs = [
                {"role": "user" if j % 2 == 0 else "assistant", "content": pool[97 * s + j]}
                for j in range(SESSION)
            ]
            store.capture(f"d{s:03d}", "s0", msgs)
        svc = store.internals.pipeline
        assert svc is not None
        t0 = time.perf_counter()
        outcomes = [o for s in range(sessions) for o in svc.run_pipeline(f"d{s:03d}", wait=True)]
        took = time.perf_counter() - t0
        with store.internals.db.read() as conn:
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


BACKENDS = ("sqlite", "postgresql")


def run_backends(
    url: str | None,
    *,
    layouts: Sequence[Layout] = (Layout(100, 1000), Layout(1, 100_000)),
    backends: Sequence[str] = BACKENDS,
    embedder: str = "hashing",
    turns: int = 500,
    n_queries: int = 200,
    sessions: int = 40,
    keep: Path | None = None,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
    done: Callable[[dict[str, Any]], None] = lambda _: None,
) -> dict[str, Any]:
    """Every layout on every backend; ``url`` (PostgreSQL) when it is one of them.
    ``done`` gets the results so far after each store (a long run's partial
    results survive an interruption)."""
    pg_url: str | None = None
    if "postgresql" in backends:
        target = parse(url or "")
        if target.url is None:
            raise ValueError("bench scale --db takes a PostgreSQL URL (SQLite runs beside it)")
        pg_url = target.url
    res: dict[str, Any] = {
        "server": safe_url(pg_url) if pg_url else None,
        "layouts": [lay.label for lay in layouts],
        "embedder": embedder,
        "turns": turns,
        "n_queries": n_queries,
        "sessions": sessions,
        "per_transaction": PER_TRANSACTION,
        "runs": {},
    }
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for backend in backends:
            kept = _Kept(keep, pg_url) if keep is not None else None
            for i, layout in enumerate(layouts):
                name = f"{backend} {layout.label}"
                log(f"{name}: build (bulk fill, reindex) or reuse")
                rec, built = _built(backend, layout, embedder, kept, pg_url, tmp)
                log(f"{name}: capture, search, rebuild on a copy")
                with _copy(backend, built, kept, pg_url, tmp) as where:
                    run = {"build": rec, **measure(where, layout, embedder=embedder,
                                                   turns=turns, n_queries=n_queries)}  # fmt: skip
                    if backend == "postgresql":
                        run["scratch_database"] = where.rpartition("/")[2]
                    if i == 0 and sessions:
                        log(f"{name}: derivation")
                        run["derive"] = _derive(where, sessions)
                res["runs"][f"{backend} {layout.label}"] = run
                done(res)
                if kept is None and backend == "sqlite":
                    Path(built).unlink(missing_ok=True)
    return res
