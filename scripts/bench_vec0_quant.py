"""vec0 element types on one large partition: float, int8, bit (+ float
re-scoring), and memstore's in-memory partition copy (``HotPartitions``,
through a SQLAlchemy connection as the engine uses it), next to numpy over
the same vectors, in one process.

Usage: PYTHONPATH=. .venv/bin/python scripts/bench_vec0_quant.py [N] [db path]
Vectors are synthetic (rank-64 signal + noise, unit length), so the recall
column says how much each quantisation loses on them, not on a real model.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_vec

from memstore.db.driver import sqlite_module
from memstore.db.engine import Database
from memstore.vectors.hot import HotPartitions
from memstore.vectors.spaces import Space

D, K, OVER = 384, 20, 10
TABLES = {
    "vf": "embedding float[384] distance_metric=cosine",
    "vi": "embedding int8[384] distance_metric=cosine",
    "vb": "embedding bit[384]",
}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    path = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/vec0_quant.db")
    fresh = not path.exists()
    db = sqlite_module().connect(str(path))
    db.enable_load_extension(True)
    db.load_extension(sqlite_vec.loadable_path())
    rng = np.random.default_rng(0)
    basis = rng.standard_normal((64, D)).astype(np.float32)
    x = rng.standard_normal((n, 64)).astype(np.float32) @ basis
    x += 0.5 * rng.standard_normal((n, D)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    xi = np.round(x * (127.0 / np.abs(x).max(axis=1, keepdims=True))).astype(np.int8)
    xb = np.packbits(x > 0, axis=1)
    if fresh:
        for name, col in TABLES.items():
            db.execute(
                f"CREATE VIRTUAL TABLE {name} USING vec0(user_id text partition key, "
                f"session_id text, {col}, chunk_size=256)"
            )
        for name, data, fn in (("vf", x, "?"), ("vi", xi, "vec_int8(?)"), ("vb", xb, "vec_bit(?)")):
            db.executemany(
                f"INSERT INTO {name}(rowid, user_id, session_id, embedding) "
                f"VALUES (?, 'u', 's', {fn})",
                [(j + 1, data[j].tobytes()) for j in range(n)],
            )
        # The columns of l0_messages the in-memory copy reads (size, sessions).
        db.execute("CREATE TABLE l0_messages(id INTEGER PRIMARY KEY, user_id, session_id)")
        db.executemany("INSERT INTO l0_messages VALUES (?, 'u', 's')", [(j + 1,) for j in range(n)])
        db.commit()
    qs = x[rng.integers(0, n, 60)] + 0.3 * rng.standard_normal((60, D)).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)

    def knn(table: str, arg: str, blob: bytes, k: int) -> list[int]:
        sql = f"SELECT rowid FROM {table} WHERE embedding MATCH {arg} AND k = ? AND user_id = 'u'"
        return [r[0] for r in db.execute(sql, (blob, k))]

    def numpy_(q: Any) -> list[int]:
        return list(np.argsort(-(x @ q))[:K] + 1)

    def int8(q: Any) -> list[int]:
        qi = np.round(q * 127 / np.abs(q).max()).astype(np.int8)
        return knn("vi", "vec_int8(?)", qi.tobytes(), K)

    def bit_rescored(q: Any) -> list[int]:
        ids = np.array(knn("vb", "vec_bit(?)", np.packbits(q > 0).tobytes(), K * OVER)) - 1
        return list(ids[np.argsort(-(x[ids] @ q))[:K]] + 1)

    store_db = Database(path)
    space = Space("l0:bench", "l0", "bench", D, "vf", n, True, 0)
    hot = HotPartitions()
    with store_db.read() as conn:
        t0 = time.perf_counter()
        hot.search(conn, space, "u", qs[0], K)
        load_s = time.perf_counter() - t0

    def in_memory(q: Any) -> list[int]:
        with store_db.read() as conn:
            got = hot.search(conn, space, "u", q, K)
        assert got is not None
        return [i for i, _ in got]

    truth = [numpy_(q) for q in qs]
    cases: dict[str, Callable[[Any], list[int]]] = {
        "numpy float32 (reference)": numpy_,
        "vec0 float": lambda q: knn("vf", "?", q.tobytes(), K),
        "memstore in-memory copy": in_memory,
        "vec0 int8": int8,
        f"vec0 bit, top {K * OVER} re-scored": bit_rescored,
    }
    print("load", Path("/proc/loadavg").read_text().strip(), "rows", n)
    print(f"in-memory copy: first search (loads the partition) {load_s:.2f} s")
    for name, fn in cases.items():
        ms, got = [], []
        for q in qs:
            t0 = time.perf_counter()
            got.append(fn(q))
            ms.append((time.perf_counter() - t0) * 1000)
        ms.sort()
        pairs = zip(got, truth, strict=True)
        rec = np.mean([len(set(a[:10]) & set(b[:10])) / 10 for a, b in pairs])
        p50, p95 = ms[len(ms) // 2], ms[int(len(ms) * 0.95)]
        print(f"{name:32s} p50 {p50:8.2f} ms  p95 {p95:8.2f} ms  recall@10 {rec:.3f}")


if __name__ == "__main__":
    main()
