"""Filtered KNN on pgvector: which plan gives a user's full top-k fast.

Two layouts of 100k 384-d vectors, each in its own table with a btree on
``user_id`` and an HNSW index (m 16, ef_construction 64, cosine):

- ``many``: 100 users x 1,000 vectors, plus one small user of 5;
- ``one``:  1 user x 100,000 vectors.

Per layout and user kind, each plan answers the same queries with
``WHERE user_id = :u ORDER BY embedding <=> :q LIMIT 10``:

- ``exact``: the user's rows first (a MATERIALIZED CTE over the btree), then
  an exact sort — the plan memstore.vectors.pg uses;
- ``hnsw``: the HNSW index with the filter applied after it (pgvector's
  default, ``hnsw.iterative_scan = off``), ef_search 40; forced with
  ``enable_sort = off`` (the planner, left alone, may pick the btree and
  sort, i.e. the exact plan, when its statistics say the user is small —
  and the HNSW plan when they say otherwise, e.g. right after a bulk load
  or for a user whose share it overestimates);
- ``hnsw+relaxed`` / ``hnsw+strict``: iterative index scans (pgvector >= 0.8).

Printed: p50/p95 ms, mean rows returned (10 when the user has >= 10 rows, 5
for the small user), recall@10 against numpy's exact answer. Also the insert
rate into each table with and without the HNSW index (the background indexer
writes row batches into a live table).

Usage: PYTHONPATH=. .venv/bin/python scripts/bench_pgvector_knn.py URL [queries]
(URL: a PostgreSQL URL; a database ``pgvec_knn`` is created on that server
and kept for the next run, which reuses its tables; ``--drop`` drops it).
Vectors are synthetic (rank-64 signal + noise, unit length); the recall
column is about the plans, not a model.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

D, K = 384, 10
rng = np.random.default_rng(7)
BASIS = rng.standard_normal((64, D)).astype(np.float32)


def vectors(n: int) -> np.ndarray[Any, Any]:
    m = rng.standard_normal((n, 64)).astype(np.float32) @ BASIS
    m += 0.5 * rng.standard_normal((n, D)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def lit(v: np.ndarray[Any, Any]) -> str:
    return "[" + ",".join(f"{x:.6f}" for x in v) + "]"


def load(conn: psycopg.Connection[Any], table: str, users: list[tuple[str, int]]) -> None:
    total = sum(n for _, n in users)
    have = conn.execute(
        "SELECT count(*) FROM pg_indexes WHERE tablename = %s AND indexdef LIKE '%%hnsw%%'",
        (table,),
    ).fetchone()
    if have and have[0] and conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (total,):
        print(f"{table}: {total} rows, kept from an earlier run", flush=True)
        return
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(
        f"CREATE TABLE {table} (id bigint PRIMARY KEY, user_id text NOT NULL, "
        f"embedding vector({D}) NOT NULL)"
    )
    nid = 0
    with conn.cursor().copy(f"COPY {table} (id, user_id, embedding) FROM STDIN") as cp:
        for u, n in users:
            mat = vectors(n)
            ids = np.arange(nid, nid + n)
            nid += n
            for i, v in zip(ids, mat, strict=True):
                cp.write_row((int(i), u, lit(v)))
    conn.execute(f"CREATE INDEX ON {table} (user_id)")
    conn.commit()
    t = time.perf_counter()
    conn.execute("SET maintenance_work_mem = '512MB'")
    conn.execute(f"CREATE INDEX ON {table} USING hnsw (embedding vector_cosine_ops)")
    conn.commit()
    print(f"{table}: {nid} rows, HNSW build {time.perf_counter() - t:.1f} s", flush=True)
    conn.execute(f"ANALYZE {table}")
    conn.commit()


def stored(conn: psycopg.Connection[Any], table: str, user: str) -> tuple[Any, Any]:
    """(ids, unit vectors) of a user as stored: the ground truth and the
    in-memory reference are computed from what the table holds."""
    rows = conn.execute(
        f"SELECT id, vector_send(embedding) FROM {table} WHERE user_id = %s ORDER BY id", (user,)
    ).fetchall()
    conn.commit()
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    mat = np.frombuffer(b"".join(bytes(r[1])[4:] for r in rows), dtype=">f4").astype(np.float32)
    return ids, mat.reshape(len(rows), D)


PLANS = {
    "exact": (
        "off",
        "WITH c AS MATERIALIZED (SELECT id, embedding FROM {t} WHERE user_id = %(u)s) "
        "SELECT id FROM c ORDER BY embedding <=> %(q)s::vector LIMIT 10",
    ),
    "hnsw": (
        "off",
        "SELECT id FROM {t} WHERE user_id = %(u)s ORDER BY embedding <=> %(q)s::vector LIMIT 10",
    ),
    "hnsw+relaxed": (
        "relaxed_order",
        "SELECT id FROM {t} WHERE user_id = %(u)s ORDER BY embedding <=> %(q)s::vector LIMIT 10",
    ),
    "hnsw+strict": (
        "strict_order",
        "SELECT id FROM {t} WHERE user_id = %(u)s ORDER BY embedding <=> %(q)s::vector LIMIT 10",
    ),
}


def run(conn: psycopg.Connection[Any], table: str, users: list[str], nq: int) -> dict[str, Any]:
    queries = vectors(nq)
    data = {u: stored(conn, table, u) for u in users}
    for plan, (mode, sql) in PLANS.items():
        times, rows, recall = [], [], []
        for j, q in enumerate(queries):
            u = users[j % len(users)]
            ids, mat = data[u]
            truth = set(ids[np.argsort(-(mat @ q))[:K]].tolist())
            with conn.transaction():
                conn.execute(f"SET LOCAL hnsw.iterative_scan = {mode}")
                # The HNSW plans must use the index: left alone, the planner
                # picks the btree + sort for a small user (the exact plan).
                conn.execute(f"SET LOCAL enable_sort = {'on' if plan == 'exact' else 'off'}")
                t = time.perf_counter()
                got = [r[0] for r in conn.execute(sql.format(t=table), {"u": u, "q": lit(q)})]
                times.append((time.perf_counter() - t) * 1000)
            rows.append(len(got))
            recall.append(len(truth & set(got)) / len(truth))
        p50, p95 = np.percentile(times, [50, 95])
        print(
            f"  {plan:13s} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  rows {np.mean(rows):5.2f}  "
            f"recall@10 {np.mean(recall):.3f}",
            flush=True,
        )
    return data


def in_memory(data: dict[str, Any], users: list[str], nq: int) -> None:
    """The reference: numpy over the user's unit vectors in memory, as
    memstore.vectors.hot searches a large partition (exact)."""
    queries = vectors(nq)
    times = []
    for j, q in enumerate(queries):
        _, mat = data[users[j % len(users)]]
        t = time.perf_counter()
        sims = mat @ q
        top = np.argpartition(-sims, K - 1)[:K] if len(sims) > K else np.arange(len(sims))
        top[np.argsort(-sims[top])]
        times.append((time.perf_counter() - t) * 1000)
    p50, p95 = np.percentile(times, [50, 95])
    print(f"  {'in memory':13s} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  (numpy, exact)", flush=True)


def insert_rate(conn: psycopg.Connection[Any], table: str, hnsw: bool) -> float:
    conn.execute(f"CREATE TEMP TABLE ins_{table} (LIKE {table} INCLUDING INDEXES)")
    if not hnsw:
        for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE '%%hnsw%%'",
            (f"ins_{table}",),
        ).fetchall():
            conn.execute(f"DROP INDEX {name}")
    conn.execute(f"INSERT INTO ins_{table} SELECT * FROM {table} WHERE id < 20000")
    conn.commit()
    batch = vectors(2000)
    t = time.perf_counter()
    with conn.cursor() as cur:
        for s in range(0, 2000, 64):
            cur.executemany(
                f"INSERT INTO ins_{table} VALUES (%s, 'x', %s)",
                [(10**9 + s + i, lit(v)) for i, v in enumerate(batch[s : s + 64])],
            )
            conn.commit()
    rate = 2000 / (time.perf_counter() - t)
    conn.execute(f"DROP TABLE ins_{table}")
    conn.commit()
    return rate


def main() -> None:
    url = sys.argv[1].replace("postgresql+psycopg://", "postgresql://")
    nq = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 100
    with psycopg.connect(url, autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = 'pgvec_knn'").fetchone():
            admin.execute("CREATE DATABASE pgvec_knn")
    base = url.rsplit("/", 1)[0]
    try:
        with psycopg.connect(f"{base}/pgvec_knn") as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.commit()
            print("loadavg", Path("/proc/loadavg").read_text().strip(), flush=True)
            load(conn, "many", [(f"u{i}", 1000) for i in range(100)] + [("small", 5)])
            print("100 users x 1k, a 1k user:", flush=True)
            users = [f"u{i}" for i in range(100)]
            in_memory(run(conn, "many", users, nq), users, nq)
            print("100 users x 1k, the 5-row user:", flush=True)
            run(conn, "many", ["small"], max(10, nq // 5))
            load(conn, "one", [("solo", 100_000)])
            print("1 user x 100k:", flush=True)
            in_memory(run(conn, "one", ["solo"], nq), ["solo"], nq)
            for hnsw in (False, True):
                r = insert_rate(conn, "one", hnsw)
                print(f"insert, batches of 64 into 20k rows, hnsw={hnsw}: {r:,.0f} rows/s")
            print("loadavg", Path("/proc/loadavg").read_text().strip(), flush=True)
    finally:
        if "--drop" in sys.argv:
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("DROP DATABASE IF EXISTS pgvec_knn")


if __name__ == "__main__":
    main()
