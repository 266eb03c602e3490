"""Vector spaces on PostgreSQL: one pgvector table per (kind, embedding model).

The same contract as the sqlite-vec tables (memstore.vectors.spaces): a row's
id is its source row's id, ``user_id`` and the filter columns sit beside the
vector, the cosine distance ``<=>`` equals vec0's ``distance_metric=cosine``,
and vectors cross the driver as float32 blobs (``to_blob``) so the indexer,
search and recall see one format on both backends.

**Filtered KNN: an exact per-user scan, no HNSW index** (chosen by
measurement: memstore bench pgvector-knn, 100k 384-d synthetic vectors per
layout, 100 queries, load average 21-22 on 2 cores, so compare within a
row; BENCHMARKS.md "pgvector: filtered KNN"). At 100 users x 1k, with the
planner made to use an HNSW index for ``WHERE user_id = :u ORDER BY
embedding <=> :q LIMIT 10``, the graph is walked first (ef_search 40
candidates of all users) and the filter applied after: 0.55 rows of 10 came
back on average (recall@10 0.055), 0.05 of 5 for a 5-row user. Iterative
scans (pgvector 0.8, ``hnsw.iterative_scan``) fill the list for a 1k user
but took ~60x the exact plan (p50 471 / 452 ms for relaxed / strict order
against 7.5 ms; recall 0.91 / 0.77) and, for the 5-row user, ran ~1.2 s to
``hnsw.max_scan_tuples`` and found 1.2 of its 5 rows. Reading the user's
rows through the btree on ``user_id`` and sorting them exactly returned
every row, recall 1.0, p50 7.5 ms (1k rows) and 4.9 ms (5 rows). The query
below puts that read in a MATERIALIZED CTE, so an HNSW index added by hand
cannot take the plan over (tests/contract/test_vector_contract.py).

One user of 100k is where HNSW is fast: 33 ms against 1.5 s for the exact
scan in PostgreSQL, but recall@10 0.53 at ef_search 40 on these vectors.
memstore does not ask PostgreSQL for those: a partition of >= 10k vectors is
searched in an exact in-memory copy (memstore.vectors.hot, as on SQLite;
128 ms in that loaded run, numpy's own time, ~8 ms on an idle machine),
loaded once with ``vector_send`` and kept current by the cursor, epoch and
rewrites of ``vector_spaces``. Without an HNSW index the indexer's writes
stay plain btree inserts (batches of 64 into 20k rows: 385 rows/s, 15 with
HNSW), and both backends return the same exact ranking.

Erasure copies the surviving vectors into a new table under their new ids and
drops the old one (``copy_moved``), so no erased vector stays in a live data
file — the same as a fresh vec0 table on SQLite.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text

if TYPE_CHECKING:
    import numpy as np

# Filter columns per kind, after (id, user_id): the same as the vec0 tables.
COLUMNS = {"l0": ("session_id",), "l1": ("mtype", "scene")}


def ddl(table: str, kind: str, dims: int) -> list[str]:
    extra = "".join(f", {c} text" for c in COLUMNS[kind])
    return [
        f'CREATE TABLE IF NOT EXISTS "{table}" (id bigint PRIMARY KEY, user_id text NOT NULL'
        f"{extra}, embedding vector({int(dims)}) NOT NULL)",
        # The exact per-user scan reads the user's rows through this index.
        f'CREATE INDEX IF NOT EXISTS "{table}_user" ON "{table}" (user_id)',
    ]


def create(conn: Connection, table: str, kind: str, dims: int) -> None:
    for stmt in ddl(table, kind, dims):
        conn.execute(text(stmt))


@functools.cache
def _template(dims: int) -> str:
    return "[" + ",".join(["%.9g"] * dims) + "]"


def literal(blob: bytes) -> str:
    """pgvector's text form of a float32 blob ('[x,y,...]').

    Nine significant digits identify every float32 exactly, so the value
    pgvector parses is the stored one, bit for bit; one %-format of the
    whole vector costs about 0.4× of repr() per element (measured 146 against
    360 µs of CPU for 384 dimensions), and reindexing formats every vector."""
    import numpy as np

    values = np.frombuffer(blob, dtype="<f4").tolist()
    return _template(len(values)) % tuple(values)


def _blob(raw: bytes) -> bytes:
    """A ``vector_send`` result (int16 dims, int16 unused, big-endian float4s)
    as a float32 little-endian blob."""
    import numpy as np

    return np.frombuffer(raw, dtype=">f4", offset=4).astype("<f4").tobytes()


def write(conn: Connection, table: str, kind: str, rows: list[dict[str, Any]]) -> None:
    """Insert or replace vectors; ``rows``: id, u (user), m0[, m1] (filter
    columns in ``COLUMNS`` order) and v (a float32 blob)."""
    cols = COLUMNS[kind]
    names = ", ".join(["id", "user_id", *cols, "embedding"])
    marks = ", ".join([":id", ":u", *(f":m{j}" for j in range(len(cols))), "CAST(:v AS vector)"])
    sets = ", ".join(f"{c} = excluded.{c}" for c in ("user_id", *cols, "embedding"))
    stmt = text(
        f'INSERT INTO "{table}" ({names}) VALUES ({marks}) ON CONFLICT (id) DO UPDATE SET {sets}'
    )
    conn.execute(stmt, [{**r, "v": literal(r["v"])} for r in rows])


def knn(
    conn: Connection,
    table: str,
    kind: str,
    user_id: str,
    query: bytes,
    k: int,
    filters: dict[str, str],
) -> list[tuple[int, float]]:
    """The user's ``k`` nearest rows as (id, cosine distance), exact (see the
    module docstring); ``filters``: filter column -> required value."""
    params: dict[str, Any] = {"u": user_id, "q": literal(query), "k": int(k)}
    where = "user_id = :u"
    for j, (col, value) in enumerate(sorted(filters.items())):
        if col not in COLUMNS[kind]:
            raise ValueError(f"no filter column {col!r} for {kind}")
        where += f" AND {col} = :f{j}"
        params[f"f{j}"] = value
    # MATERIALIZED: the user's rows are read first, whatever index may exist
    # on the table (an HNSW index added by hand would otherwise be walked
    # before the filter and return too few rows).
    sql = (
        f'WITH c AS MATERIALIZED (SELECT id, embedding FROM "{table}" WHERE {where}) '
        "SELECT id, embedding <=> CAST(:q AS vector) AS d FROM c ORDER BY d, id LIMIT :k"
    )
    return [(int(r[0]), float(r[1])) for r in conn.execute(text(sql), params)]


def by_id(conn: Connection, table: str, ids: list[int]) -> dict[int, bytes]:
    """Float32 blobs of the given rows (missing rows are left out)."""
    if not ids:
        return {}
    rows = conn.execute(
        text(f'SELECT id, vector_send(embedding) FROM "{table}" WHERE id = ANY(:ids)'),
        {"ids": [int(i) for i in ids]},
    )
    return {int(r[0]): _blob(bytes(r[1])) for r in rows}


def partition(
    conn: Connection,
    table: str,
    user_id: str,
    dims: int,
    *,
    after: int = 0,
    upto: int | None = None,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(ids, float32 matrix) of a user's vectors with ``after < id <= upto``,
    in id order: one indexed read (memstore.vectors.hot's copies)."""
    import numpy as np

    sql = f'SELECT id, vector_send(embedding) FROM "{table}" WHERE user_id = :u'
    params: dict[str, Any] = {"u": user_id}
    if after > 0:
        # Only when it selects something: "id > 0" (a user's whole copy) led
        # the planner, on statistics that overestimated the user, to AND a
        # bitmap of every row's key with the user's (10 of 21 ms, auto_explain).
        sql += " AND id > :a"
        params["a"] = int(after)
    if upto is not None:
        sql += " AND id <= :b"
        params["b"] = int(upto)
    rows = conn.execute(text(sql + " ORDER BY id"), params).all()
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros((0, dims), dtype=np.float32)
    ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
    raw = b"".join(bytes(r[1])[4:] for r in rows)
    mat = np.frombuffer(raw, dtype=">f4").astype(np.float32).reshape(len(rows), dims)
    return ids, mat


def count(conn: Connection, table: str) -> int:
    return int(conn.execute(text(f'SELECT count(*) FROM "{table}"')).scalar_one())


def copy_moved(
    conn: Connection, old: str, new: str, kind: str, dims: int, moved: dict[int, int]
) -> int:
    """Fill ``new`` with the vectors of ``old`` whose ids survive (``moved``:
    old id -> new id), then drop ``old``; returns how many were copied."""
    create(conn, new, kind, dims)
    cols = ", ".join(["user_id", *COLUMNS[kind], "embedding"])
    pairs = sorted(moved.items())
    copied = 0
    for i in range(0, len(pairs), 10_000):
        chunk = pairs[i : i + 10_000]
        copied += (
            conn.execute(
                text(
                    f'INSERT INTO "{new}" (id, {cols}) SELECT m.new_id, {cols} FROM "{old}" t '
                    "JOIN unnest(CAST(:o AS bigint[]), CAST(:n AS bigint[])) AS m(old_id, new_id) "
                    "ON t.id = m.old_id"
                ),
                {"o": [o for o, _ in chunk], "n": [n for _, n in chunk]},
            ).rowcount
            or 0
        )
    conn.execute(text(f'DROP TABLE IF EXISTS "{old}"'))
    return copied
