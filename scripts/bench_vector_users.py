"""Vector searches of many small users: in-memory copies against vec0, in one
process, alternating per query (so the machine's load hits both alike).

Each query is embedded first, as recall does, then searched with
``strategy="vector"`` twice: with the engine's copies (memstore.vectors.hot,
loaded in the background after a user's first search) and with vec0 only
(``HotPartitions(kinds=())``). The first pass over every user is "cold"
(answered by vec0 while the copy loads), the rest "warm" (random users).

Usage (on a COPY of a store; e5 stores need the [embed] extra):
    PYTHONPATH=. .venv/bin/python scripts/bench_vector_users.py <store copy> [queries]
e.g. a copy of the recall-scale store (100 users x 1k messages + 100 memories).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from memstore import Store
from memstore.bench.capture_search import queries
from memstore.config import Settings
from memstore.vectors.hot import HotPartitions


def main(path: str, n: int) -> None:
    settings = Settings().replace(embedder="e5", background_indexer=False, scheduler=False)
    store = Store.open(path, settings=settings)
    engine = store.search_engine
    with engine.db.read() as conn:
        users = [r[0] for r in conn.exec_driver_sql("SELECT DISTINCT user_id FROM l0_messages")]
    rng = random.Random(5)
    order = users + [rng.choice(users) for _ in range(max(0, n - len(users)))]
    times: dict[str, list[tuple[float, float]]] = {}

    def timed(name: str, f: Callable[..., Any], *args: Any, **kw: Any) -> None:
        cpu, wall = time.thread_time(), time.perf_counter()
        f(*args, **kw)
        got = ((time.thread_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000)
        times.setdefault(name, []).append(got)

    hot, vec0 = HotPartitions(background=engine.db.read), HotPartitions(kinds=())
    seen: set[str] = set()
    for i, (q, user) in enumerate(zip(queries(len(order), seed=13), order, strict=True)):
        tag = "warm" if user in seen else "cold"
        seen.add(user)
        engine.queries.cache.clear()
        engine.queries.blob(q)
        modes = [(hot, "memory"), (vec0, "vec0")]
        for mode, name in modes if i % 2 else modes[::-1]:
            engine.hot = mode
            vector = {"user_id": user, "strategy": "vector"}
            timed(f"l1 {tag} {name}", store.search_memories, q, limit=10, **vector)
            timed(f"l0 {tag} {name}", store.search_conversations, q, limit=20, **vector)
    print("ms per search            n   cpu p50  cpu p95  wall p50  wall p95")
    for name in sorted(times):
        v = times[name]
        cpu = sorted(x[0] for x in v)
        wall = sorted(x[1] for x in v)
        p95 = int(len(v) * 0.95)
        print(
            f"{name:18s} {len(v):5d} {statistics.median(cpu):8.2f} {cpu[p95]:8.2f}"
            f" {statistics.median(wall):9.2f} {wall[p95]:9.2f}"
        )
    with open("/proc/loadavg") as f:
        print("load average", f.read().split()[:3])
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 400)
