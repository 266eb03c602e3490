"""``memstore bench hermes``: the provider's costs through hermes-agent's real MemoryManager.

Measures what a Hermes turn pays: ``initialize`` cold (the process opens the
store) and warm (a new provider instance joins the open store, as the
api_server does per request), ``sync_turn`` (timed inside the provider, on
Hermes' sync worker; plus ``sync_all`` as the agent thread sees it) and
``prefetch_all`` (Hermes' own thread-and-join path, as the turn waits for it),
with 1k and 10k memories for the user.

Memories are seeded as ``l1.written`` events in large batches (the same events
a host's memory writes produce), then embedded before timing.
"""

from __future__ import annotations

import functools
import gc
import importlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memstore.bench.capture_search import queries, text_pool
from memstore.bench.metrics import percentile
from memstore.errors import ConfigError
from memstore.hermes_provider.stores import shared_stores
from memstore.store import Store

TARGETS = {"init_warm_ms": 100.0, "sync_turn_p99_ms": 10.0, "prefetch_p95_ms": 100.0}
USER = "bench-user"
SEED_BATCH = 500

Log = Callable[[str], None]


def _hermes() -> tuple[Any, Any]:
    try:
        manager = importlib.import_module("agent.memory_manager").MemoryManager
        provider = importlib.import_module("memstore.hermes_provider").MemstoreProvider
    except ImportError as exc:
        raise ConfigError(
            f"bench hermes needs hermes-agent and an installed memstore ({exc}): "
            'pip install "memstore-agent[hermes]"'
        ) from exc
    return manager, provider


def seed_memories(store: Store, n: int, user_id: str = USER) -> float:
    """Append ``n`` distinct memories for ``user_id``; returns seconds taken."""
    from memstore.bench.scale import seed_decision
    from memstore.derive.events import MemoryWritten
    from memstore.derive.queries import active_generation
    from memstore.derive.runs import append_checked

    texts = text_pool(n, seed=23)
    with store.internals.db.read() as conn:
        gen = active_generation(conn, user_id)
    started = time.perf_counter()
    for i in range(0, n, SEED_BATCH):
        events = []
        for j, content in enumerate(texts[i : i + SEED_BATCH]):
            kind = ("persona", "episodic", "instruction")[(i + j) % 3]
            decision = seed_decision(content, kind, "bench seed")
            events.append(MemoryWritten(gen, "host", decision))
        append_checked(store.internals.derivation, user_id, events)
    store.reindex()
    return time.perf_counter() - started


def _ms(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 3),
        "p95": round(percentile(values, 95), 3),
        "p99": round(percentile(values, 99), 3),
        "max": round(max(values), 3),
        "n": len(values),
    }


def _timed_sync(provider: Any, sink: list[float]) -> None:
    # Wrapped on the instance: the manager calls it on its sync worker, and
    # functools.wraps keeps the signature it inspects for `messages`.
    inner = provider.sync_turn

    @functools.wraps(inner)
    def sync_turn(*args: Any, **kwargs: Any) -> None:
        t = time.perf_counter()
        inner(*args, **kwargs)
        sink.append((time.perf_counter() - t) * 1000)

    provider.sync_turn = sync_turn


def bench_size(
    size: int, *, embedder: str, workdir: Path, turns: int, n_queries: int, log: Log
) -> dict[str, Any]:
    manager_cls, provider_cls = _hermes()
    home = workdir / f"hermes-{size}"
    home.mkdir(parents=True, exist_ok=True)
    # Background derivation is off while timing (captures still record their
    # pipeline state inline): its runs would compete for the write lock, and
    # closing a store mid-run currently deadlocks in Timers.shutdown.
    cfg = {"embedder": embedder, "store_linger_s": 0, "scheduler": False}

    def new_manager(session: str) -> tuple[Any, Any]:
        provider = provider_cls(cfg)
        mm = manager_cls()
        mm.add_provider(provider)
        mm.initialize_all(session, platform="bench", hermes_home=str(home), user_id=USER)
        return mm, provider

    mm, provider = new_manager("seed")
    log(f"  seeding {size} memories ({embedder})")
    # The provider's own user: on a multi-user platform ("bench") the host's
    # user id is namespaced by the platform (provider/identity.py).
    seeded_s = seed_memories(provider.store, size, provider.user_id)
    mm.shutdown_all()
    shared_stores().close_all()

    cold: list[float] = []
    for _ in range(3):
        t = time.perf_counter()
        mm, provider = new_manager("cold")
        cold.append((time.perf_counter() - t) * 1000)
        mm.shutdown_all()
        shared_stores().close_all()

    keeper, _ = new_manager("keeper")  # the store stays open, as in a running server
    warm: list[float] = []
    for i in range(200):
        t = time.perf_counter()
        mm, provider = new_manager(f"warm-{i}")
        warm.append((time.perf_counter() - t) * 1000)
        mm.shutdown_all()

    mm, provider = new_manager("turns")
    inside: list[float] = []
    _timed_sync(provider, inside)
    submit: list[float] = []
    history: list[dict[str, Any]] = []
    for i, text in enumerate(text_pool(turns, seed=41)):
        history += [{"role": "user", "content": text}, {"role": "assistant", "content": f"ok {i}"}]
        t = time.perf_counter()
        mm.sync_all(text, f"ok {i}", session_id="turns", messages=list(history))
        submit.append((time.perf_counter() - t) * 1000)
        mm.flush_pending(timeout=30)  # one turn at a time, as a conversation goes

    prefetch: list[float] = []
    empty = 0
    for q in queries(n_queries, seed=5):
        t = time.perf_counter()
        out = mm.prefetch_all(q)
        prefetch.append((time.perf_counter() - t) * 1000)
        empty += not out
    mm.shutdown_all()
    keeper.shutdown_all()
    shared_stores().close_all()
    gc.collect()
    return {
        "memories": size,
        "seed_s": round(seeded_s, 2),
        "init_cold_ms": _ms(cold),
        "init_warm_ms": _ms(warm),
        "sync_turn_ms": _ms(inside),
        "sync_all_submit_ms": _ms(submit),
        "prefetch_ms": _ms(prefetch),
        "prefetch_empty": empty,
    }


def run_hermes_bench(
    sizes: list[int],
    *,
    embedder: str = "hashing",
    turns: int = 200,
    n_queries: int = 200,
    workdir: Path | None = None,
    log: Log = print,
) -> dict[str, Any]:
    _hermes()
    results = []
    with tempfile.TemporaryDirectory(prefix="memstore-bench-hermes-", dir=workdir) as tmp:
        for size in sizes:
            log(f"hermes bench: {size} memories")
            results.append(
                bench_size(
                    size,
                    embedder=embedder,
                    workdir=Path(tmp),
                    turns=turns,
                    n_queries=n_queries,
                    log=log,
                )
            )
    largest = max(results, key=lambda r: r["memories"])
    checks = {
        "init_warm_ms": largest["init_warm_ms"]["p50"] < TARGETS["init_warm_ms"],
        "sync_turn_p99_ms": largest["sync_turn_ms"]["p99"] < TARGETS["sync_turn_p99_ms"],
        "prefetch_p95_ms": largest["prefetch_ms"]["p95"] < TARGETS["prefetch_p95_ms"],
    }
    return {
        "name": "hermes",
        "embedder": embedder,
        "turns": turns,
        "queries": n_queries,
        "results": results,
        "targets": TARGETS,
        "targets_met": checks,
    }


def format_hermes_bench(res: dict[str, Any]) -> str:
    head = (
        f"Hermes provider through MemoryManager (embedder {res['embedder']}; ms)\n"
        f"{'memories':>9} {'init cold':>10} {'init warm p50/p95':>18} "
        f"{'sync_turn p50/p99':>18} {'prefetch p50/p95':>17}"
    )
    lines = [head]
    for r in res["results"]:
        lines.append(
            f"{r['memories']:>9} {r['init_cold_ms']['p50']:>10.1f} "
            f"{r['init_warm_ms']['p50']:>8.2f} / {r['init_warm_ms']['p95']:<7.2f} "
            f"{r['sync_turn_ms']['p50']:>8.2f} / {r['sync_turn_ms']['p99']:<7.2f} "
            f"{r['prefetch_ms']['p50']:>7.2f} / {r['prefetch_ms']['p95']:<7.2f}"
        )
    met = ", ".join(
        f"{k} < {res['targets'][k]:g}: {'yes' if ok else 'NO'}"
        for k, ok in res["targets_met"].items()
    )
    lines.append(f"targets at the largest size: {met}")
    return "\n".join(lines)


__all__ = ["TARGETS", "format_hermes_bench", "run_hermes_bench", "seed_memories"]
