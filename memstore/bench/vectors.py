"""Vector-side figures: one large partition, bytes per message.

``python -m memstore.bench.vectors --size 100000 --users 1`` builds a store
(hashing embedder, context vectors on, the defaults otherwise), times the
reindex, then hybrid and vector search of one user with the in-memory
partition copy (the default) and with vec0 alone, next to numpy over the
same vectors read back from vec0, measured in the same run; then a rebuild
(and whether vector search answers right after it) and the bytes per
message of each table (dbstat). Load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from memstore.bench.capture_search import queries, stats, text_pool
from memstore.bench.scale import capture_calls
from memstore.config import Settings
from memstore.store import Store
from memstore.vectors import spaces

try:
    from memstore.vectors.hot import HotPartitions, partition_vectors
except ImportError:  # older code without hot partitions (run with PYTHONPATH=<old tree>)
    HotPartitions = None  # type: ignore[assignment,misc]


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def bytes_per_table(store: Store, messages: int) -> dict[str, float]:
    """dbstat bytes per message, vec0 shadow tables summed under "vec0"."""
    out: dict[str, float] = {}
    with store.internals.db.read() as conn:
        for name, size in conn.exec_driver_sql(
            "SELECT name, sum(pgsize) FROM dbstat GROUP BY name"
        ):
            key = str(name).removeprefix("sqlite_autoindex_")
            key = "vec0" if key.startswith("vec_") else key
            out[key] = out.get(key, 0.0) + int(size) / messages
    total = sum(out.values())
    big = {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v >= 5}
    return {**big, "other": round(total - sum(big.values()), 1), "total": round(total, 1)}


def _time(fn: Any, qs: list[str]) -> dict[str, float]:
    ms = []
    for q in qs:
        t0 = time.perf_counter()
        fn(q)
        ms.append((time.perf_counter() - t0) * 1000)
    return stats(ms)


def run(size: int, users: int, path: Path, nq: int = 200) -> dict[str, Any]:
    res: dict[str, Any] = {"size": size, "users": users, "load_before": _loadavg()}
    settings = Settings().replace(embedder="hashing", background_indexer=False)
    pool = text_pool(min(size, 50_000))
    with Store.open(path, settings=settings) as store:
        for user, session, msgs in capture_calls(size, users, pool):
            store.capture(user, session, msgs)
        t0 = time.perf_counter()
        store.reindex()
        res["reindex_s"] = round(time.perf_counter() - t0, 2)
        res["reindex_rows_per_s"] = round(size / res["reindex_s"])
        qs = queries(nq)
        user = "u0000"
        eng = store.internals.search_engine
        assert store.internals.embedder is not None
        qv = {q: store.internals.embedder.embed_query(q) for q in qs}
        for q in qs:  # warm: the in-memory copy loads once per process
            eng.query_blob(q)
        store.search_conversations(user, qs[0], limit=10)
        store.internals.search_engine.hot_postings.wait()  # the keyword postings load in a thread
        res["hybrid_memory"] = _time(lambda q: store.search_conversations(user, q, limit=10), qs)
        res["vector_memory"] = _time(
            lambda q: store.search_conversations(user, q, limit=10, strategy="vector"),
            qs,
        )
        if HotPartitions is not None:
            eng.hot = HotPartitions(min_rows=10**12)
        res["hybrid_vec0"] = _time(lambda q: store.search_conversations(user, q, limit=10), qs)
        res["vector_vec0"] = _time(
            lambda q: store.search_conversations(user, q, limit=10, strategy="vector"),
            qs,
        )
        with store.internals.db.read() as conn:
            sp = eng.space(conn, "l0")
            assert sp is not None
            if HotPartitions is not None:
                eng.hot = HotPartitions()
                _, mat = partition_vectors(conn, sp, user)
            else:
                mat = np.stack(
                    [
                        np.frombuffer(
                            conn.exec_driver_sql(
                                f'SELECT embedding FROM "{sp.table_name}" WHERE rowid = ?', (i,)
                            ).scalar_one(),
                            dtype=np.float32,
                        )
                        for (i,) in conn.exec_driver_sql(
                            "SELECT id FROM l0_messages WHERE user_id = ?", (user,)
                        )
                    ]
                )
        mat = mat / np.linalg.norm(mat, axis=1, keepdims=True)

        def ref(q: str) -> None:
            sims = mat @ qv[q]
            np.argpartition(-sims, 10)[:10]

        res["ref_numpy"] = _time(ref, qs)
        t0 = time.perf_counter()
        store.rebuild()
        res["rebuild_s"] = round(time.perf_counter() - t0, 2)
        res["vector_ready_after_rebuild"] = eng.vector_ready("l0")
        hits = store.search_conversations(user, qs[1], strategy="vector")
        res["vector_hits_after_rebuild"] = len(hits)
        res["bytes_per_message"] = bytes_per_table(store, size)
        with store.internals.db.read() as conn:
            res["spaces"] = [s.table_name for s in spaces.list_spaces(conn)]
    res["load_after"] = _loadavg()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--users", type=int, default=1)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    random.seed(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = run(args.size, args.users, Path(tmp) / "v.db", args.queries)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
