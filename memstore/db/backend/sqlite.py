"""SQLite: FTS5 for keywords, sqlite-vec's ``vec0`` tables for vectors, one file.

sqlite-vec facts that shape the vector half: ``INSERT OR REPLACE`` fails (we
DELETE then INSERT), ``ALTER TABLE RENAME`` breaks vec0 (we never rename; a
new model gets a new table), filters belong inside the KNN query (``user_id``
is the partition key), and vec0 plans ``rowid IN (...)`` as a scan of the
whole table, so rows are read and deleted by point lookups.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, text
from sqlalchemy.sql.elements import ColumnElement

from memstore.db import elements, rawexec
from memstore.db.backend.base import Backend, CompactionResult, Partition, Storage
from memstore.db.sqlfn import driver_rows

if TYPE_CHECKING:
    from memstore.db.backend.base import Array

# Extra vec0 columns per kind: metadata columns can be filtered inside KNN.
KIND_COLUMNS = {
    "l0": "user_id text partition key, session_id text",
    "l1": "user_id text partition key, mtype text, scene text",
}
_FILTERS = {"l0": ("session_id",), "l1": ("mtype", "scene")}

# vec0 allocates a whole chunk per partition (user). The default of 1024 costs
# 1.5 MB per user at 384-d (100 users of 5 messages: 158 MB); 256 left chunks
# 39% full at 100 users x 100 messages. Small chunks slow the KNN
# of a large partition (64 was 40% slower than 256 at 50k rows), but those are
# searched in memory now (memstore.vectors.hot), so vec0 serves partitions
# under hot.MIN_ROWS rows, where 128 costs a few chunks more per query.
# Users hold far fewer memories than messages (bench vectors, 100 users x 100
# messages: a few memories each, one 128-slot chunk apiece, 1.96 KB per
# message of L1 vector chunks), so L1 chunks are smaller still.
CHUNK_SIZE = {"l0": 128, "l1": 32}

# Page cache while a rebuild replays (KiB; SQLite's default is 2 MB): the
# projections' index pages stay in memory instead of being written out and
# read back as the tables grow. An upper bound, allocated only as used.
BULK_CACHE_KIB = 131_072

# FTS5's buffer of terms not yet written to the index while a rebuild
# replays (bytes; FTS5's default, restored after, is 1 MB). A full buffer is
# written out as a new segment, and FTS5 merges segments as they pile up: on
# a rebuild of chat text the default wrote several segments per replay batch
# and merged them again. With 16 MB a batch is one segment: FTS5's inserts
# took ~20% less CPU and the index ended in fewer segments (BENCHMARKS.md,
# "Event log"). The buffer grows only as terms arrive, and holds at most one
# batch's (FTS5 writes it out at the next batch's first, lower, rowid).
BULK_FTS_HASH_BYTES = 16 << 20
_FTS_DEFAULT_HASH_BYTES = 1 << 20


# sqlite-vec's column type per element type (memstore.db.elements).
_COLUMN_TYPE = {"float32": "float", "int8": "int8"}


def vec0_ddl(table: str, kind: str, dims: int, element: str = "float32") -> str:
    """The sqlite-vec table of a space."""
    return (
        f'CREATE VIRTUAL TABLE IF NOT EXISTS "{table}" USING vec0({KIND_COLUMNS[kind]}, '
        f"embedding {_COLUMN_TYPE[elements.check(element)]}[{dims}] distance_metric=cosine, "
        f"chunk_size={CHUNK_SIZE[kind]})"
    )


def _bind(element: str, param: str) -> str:
    """A vector parameter as vec0 takes it: a bare blob is read as float32,
    an int8 one must say so."""
    return f"vec_int8({param})" if element == "int8" else param


def chunks(
    conn: Connection, table: str, user_id: str, dims: int, element: str = "float32"
) -> tuple[Array, Array, list[Array]]:
    """(slot ids, valid slots, vector blocks) of a user's vec0 partition.

    Layout of sqlite-vec 0.1.x: ``<t>_chunks`` holds per chunk a validity
    bitmap (LSB first) and the slots' rowids (int64); ``<t>_vector_chunks00``
    the slots' vectors (float32, or int8: returned as unit float32 rows,
    memstore.db.elements). A full ``SELECT`` from the vec0 table instead
    reads row by row and cannot use the partition key (14 s at 100k rows).
    The join goes through ``_rowid_``, the key vec0 itself reads chunks by
    (the table also declares a column named ``rowid``). Driver-level: the
    row objects of SQLAlchemy cost as much as the read at 1k rows.
    """
    import numpy as np

    rows = driver_rows(
        conn,
        f'SELECT c.validity, c.rowids, v.vectors FROM "{table}_chunks" c '
        f'JOIN "{table}_vector_chunks00" v ON v._rowid_ = c.chunk_id WHERE c.partition00 = ?',
        (user_id,),
    )
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), []
    slots = np.frombuffer(b"".join(r[1] for r in rows), dtype="<i8")
    valid = np.concatenate(
        [
            np.unpackbits(np.frombuffer(r[0], dtype=np.uint8), bitorder="little")[: len(r[1]) // 8]
            for r in rows
        ]
    ).astype(bool)
    blocks = [elements.matrix(r[2], element, dims) for r in rows]
    return slots, valid, blocks


def truncate_wal(raw: Any, deadline: float, busy_timeout_ms: int) -> bool:
    """Checkpoint the WAL into the file and truncate it; False if a reader of
    an older snapshot was still in the way at ``deadline``."""
    # TRUNCATE waits in the busy handler for readers; keep each wait short so
    # the bound is ours, and restore the connection's timeout afterwards.
    raw.execute("PRAGMA busy_timeout = 50")
    try:
        while True:
            busy = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            if busy == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
    finally:
        raw.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")


def vacuum_once(raw: Any) -> bool:
    """VACUUM unless the pending compaction's marker says it was done (and
    record that it was); False when no compaction is pending."""
    row = raw.execute("SELECT vacuumed FROM erasure_compaction WHERE id = 1").fetchone()
    if row is None:
        return False
    if not row[0]:
        raw.execute("VACUUM")
        raw.execute("UPDATE erasure_compaction SET vacuumed = 1 WHERE id = 1")
    return True


class SqliteBackend(Backend):
    name = "sqlite"
    keyword_index = "fts5"
    merges_fts = True

    def json_text(self, column: Any, key: str) -> ColumnElement[Any]:
        return func.json_extract(column, f"$.{key}")

    def json_text_sql(self, column: str, key: str) -> str:
        return f"json_extract({column}, '$.{key}')"

    def by_primary_key(self, column: str) -> str:
        # Unary "+" keeps the test off the column's indexes: with a plain
        # "m.user_id = ?" the planner walked the user's whole index range
        # instead of looking up the ~10-40 ids by primary key: 0.21 ms against
        # 0.02 ms for 10 rows of a 1k-message user, warm (BENCHMARKS.md,
        # "Keyword search per user"); 24 ms for a user with 100k messages.
        return f"+{column}"

    def claim_lock(self) -> str:
        return ""  # the write transaction already excludes other writers

    def claim_skip_locked(self) -> str:
        return ""

    def fts_clear(self, conn: Connection, table: str, *, contentless: bool) -> None:
        if contentless:
            # A contentless FTS5 table cannot DELETE rows it has no content
            # for; 'delete-all' empties its index.
            conn.execute(text(f"INSERT INTO {table}({table}) VALUES ('delete-all')"))
            return
        conn.execute(text(f"DELETE FROM {table}"))
        # FTS5 writes a delete marker per term of every deleted row, which the
        # rows replayed next are merged with for a while; rebuilt from its (now
        # empty) content table the index starts empty instead (after a rebuild
        # of 10k memories: 264 pages against 655).
        conn.execute(text(f"INSERT INTO {table}({table}) VALUES ('rebuild')"))

    def fts_optimize(self, conn: Connection, table: str) -> None:
        conn.execute(text(f"INSERT INTO {table}({table}) VALUES ('optimize')"))

    def fts_merge_step(self, conn: Connection, table: str, pages: int, usermerge: int) -> bool:
        # FTS5 reports no work as fewer than two changed rows (its structure
        # record alone).
        raw = conn.connection.driver_connection
        assert raw is not None
        command = f"INSERT INTO {table}({table}, rank) VALUES"
        setting = conn.exec_driver_sql(
            f"SELECT v FROM {table}_config WHERE k = 'usermerge'"
        ).scalar()
        if setting != usermerge:
            conn.exec_driver_sql(f"{command} ('usermerge', {usermerge})")
        before = int(raw.total_changes)
        conn.exec_driver_sql(f"{command} ('merge', {int(pages)})")
        return int(raw.total_changes) - before >= 2

    @contextmanager
    def bulk_load(
        self, conn: Connection, deferred_indexes: Sequence[str], fts_tables: Sequence[str] = ()
    ) -> Iterator[None]:
        # A larger page cache, a larger FTS5 term buffer, and the deferred
        # indexes dropped, then created again at the end — the last two inside
        # the caller's transaction, so a rebuild that fails or is killed
        # leaves them as they were.
        cache = conn.exec_driver_sql("PRAGMA cache_size").scalar_one()
        conn.exec_driver_sql(f"PRAGMA cache_size = -{BULK_CACHE_KIB}")
        try:
            ddl = []
            for name in deferred_indexes:
                sql = conn.exec_driver_sql(
                    "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)
                ).scalar()
                if sql:
                    ddl.append(str(sql))
                    conn.exec_driver_sql(f'DROP INDEX "{name}"')
            hash_sizes = {t: _fts_hash_size(conn, t, BULK_FTS_HASH_BYTES) for t in fts_tables}
            yield
            for table, size in hash_sizes.items():
                _fts_hash_size(conn, table, size)
            for sql in ddl:
                conn.exec_driver_sql(sql)
        finally:
            conn.exec_driver_sql(f"PRAGMA cache_size = {int(cache)}")

    vector_elements = elements.ELEMENTS

    def create_vector_table(
        self, conn: Connection, table: str, kind: str, dims: int, element: str = "float32"
    ) -> None:
        conn.execute(text(vec0_ddl(table, kind, dims, element)))

    def write_vectors(
        self,
        conn: Connection,
        table: str,
        kind: str,
        rows: list[dict[str, Any]],
        element: str = "float32",
    ) -> None:
        # One point delete per row: vec0 plans ``rowid IN (...)`` as a scan of
        # the whole table (20 ms at 100k rows, under the write lock), while
        # ``rowid = ?`` is a lookup (tests/reliability/test_reliability_query_plans.py).
        # (vec0 has no upsert: INSERT OR REPLACE fails.) Driver-level
        # statements (memstore.db.rawexec): this runs under the write lock,
        # and SQLAlchemy's per-statement work was half of a batch's time
        # there, which captures queued behind.
        if not rows:
            return
        rawexec.run_many(conn, f'DELETE FROM "{table}" WHERE rowid = ?', [(p["id"],) for p in rows])
        if element == "float32":
            blobs = [p["v"] for p in rows]
        else:
            # The whole batch in one conversion: int8 scales each row on its own.
            dims = len(rows[0]["v"]) // 4
            stored = elements.encode(b"".join(p["v"] for p in rows), element, dims)
            size = len(stored) // len(rows)
            blobs = [stored[i * size : (i + 1) * size] for i in range(len(rows))]
        v = _bind(element, "?")
        if kind == "l0":
            ins = (
                f'INSERT INTO "{table}"(rowid, user_id, session_id, embedding) '
                f"VALUES (?, ?, ?, {v})"
            )
            values: list[tuple[Any, ...]] = [
                (p["id"], p["u"], p["m0"], b) for p, b in zip(rows, blobs, strict=True)
            ]
        else:
            ins = (
                f'INSERT INTO "{table}"(rowid, user_id, mtype, scene, embedding) '
                f"VALUES (?, ?, ?, ?, {v})"
            )
            values = [
                (p["id"], p["u"], p["m0"], p["m1"], b) for p, b in zip(rows, blobs, strict=True)
            ]
        rawexec.run_many(conn, ins, values)

    def vector_knn(
        self,
        conn: Connection,
        table: str,
        kind: str,
        user_id: str,
        query: bytes,
        k: int,
        filters: dict[str, str],
        element: str = "float32",
    ) -> list[tuple[int, float]]:
        # An int8 column is searched with an int8 query (vec0 compares like
        # with like): its distances are those of the quantised query, which
        # the caller re-scores with the float one.
        blob = elements.encode(query, element, len(query) // 4)
        params: dict[str, Any] = {"v": blob, "u": user_id, "k": k}
        sql = (
            f'SELECT rowid, distance FROM "{table}" '
            f"WHERE embedding MATCH {_bind(element, ':v')} AND k = :k AND user_id = :u"
        )
        for j, col in enumerate(_FILTERS[kind]):
            if col in filters:
                sql += f" AND {col} = :f{j}"
                params[f"f{j}"] = filters[col]
        unknown = set(filters) - set(_FILTERS[kind])
        if unknown:
            raise ValueError(f"no filter column {sorted(unknown)[0]!r} for {kind}")
        # Equal distances in a stable order (by id), as the in-memory copy and
        # PostgreSQL give them: vec0 returns ties in no particular order, so the
        # same query could rank equal messages differently from one call to the next.
        return sorted(
            ((int(r[0]), float(r[1])) for r in conn.execute(text(sql), params)),
            key=lambda r: (r[1], r[0]),
        )

    def vectors_by_id(
        self, conn: Connection, table: str, ids: list[int], element: str = "float32"
    ) -> dict[int, bytes]:
        if not ids:
            return {}
        # vec0 plans ``rowid IN (...)`` as a scan of the whole table (38 ms at
        # 100k rows); joined from json_each, each id is a point lookup (~1 ms
        # for 100 ids). Driver-level: compiling the statement cost more than it.
        rows = driver_rows(
            conn,
            f'SELECT t.rowid, t.embedding FROM json_each(?) AS j JOIN "{table}" AS t '
            "ON t.rowid = j.value",
            (json.dumps([int(i) for i in ids]),),
        )
        if element == "float32":
            return {int(r[0]): bytes(r[1]) for r in rows}
        return {int(r[0]): elements.decode(bytes(r[1]), element, len(r[1])) for r in rows}

    def vector_partition(
        self, conn: Connection, table: str, user_id: str, dims: int, element: str = "float32"
    ) -> Partition:
        ids, valid, blocks = chunks(conn, table, user_id, dims, element)
        if not valid.any():
            return Partition(ids[:0], [], None)
        return Partition(ids, blocks, None if valid.all() else ~valid)

    def vectors_after(
        self,
        conn: Connection,
        table: str,
        user_id: str,
        dims: int,
        after: int,
        upto: int,
        element: str = "float32",
    ) -> tuple[Array, Array, Array | None]:
        import numpy as np

        new = conn.execute(
            text(
                "SELECT id, session_id FROM l0_messages "
                "WHERE id > :a AND id <= :b AND user_id = :u ORDER BY id"
            ),
            {"a": after, "b": upto, "u": user_id},
        ).all()
        got, names, vecs = [], [], []
        for mid, sid in new:
            # Point lookups (rowid = ?): vec0 plans rowid IN (...) as a full scan.
            row = conn.execute(
                text(f'SELECT user_id, embedding FROM "{table}" WHERE rowid = :i'),
                {"i": int(mid)},
            ).first()
            if row is None or row[0] != user_id:
                continue  # quarantined: a later retry counts as a rewrite
            got.append(int(mid))
            names.append(sid)
            vecs.append(bytes(row[1]))
        ids = np.array(got, dtype=np.int64)
        mat = (
            elements.matrix(b"".join(vecs), element, dims)
            if vecs
            else np.zeros((0, dims), dtype=np.float32)
        )
        return ids, mat, np.array(names, dtype=object)

    def copy_vectors(
        self,
        conn: Connection,
        old: str,
        new: str,
        kind: str,
        dims: int,
        moved: dict[int, int],
        element: str = "float32",
    ) -> int:
        # A new vec0 table filled by point lookups in the old one, which is
        # dropped: vec0 only flags deleted rows, so copying out is the way to
        # leave no erased vector's bytes in its chunks.
        # vec0's own rowid table: a count(*) on vec0 would read every vector.
        dropped = int(conn.execute(text(f'SELECT count(*) FROM "{old}_rowids"')).scalar_one())
        conn.execute(text(f'DROP TABLE IF EXISTS "{new}"'))
        conn.execute(text(vec0_ddl(new, kind, dims, element)))
        cols = ("user_id", *_FILTERS[kind])
        read = text(f'SELECT {", ".join(cols)}, embedding FROM "{old}" WHERE rowid = :i')
        names = ", ".join(["rowid", *cols, "embedding"])
        # The stored bytes are copied as they are (no second quantisation).
        marks = ", ".join([":rowid", *(f":{c}" for c in cols), _bind(element, ":embedding")])
        ins = text(f'INSERT INTO "{new}"({names}) VALUES ({marks})')
        batch: list[dict[str, Any]] = []
        for before, after in sorted(moved.items()):
            row = conn.execute(read, {"i": before}).first()
            if row is None:
                continue
            dropped -= 1
            batch.append({"rowid": after, **dict(zip([*cols, "embedding"], row, strict=True))})
            if len(batch) >= 500:
                conn.execute(ins, batch)
                batch = []
        if batch:
            conn.execute(ins, batch)
        conn.execute(text(f'DROP TABLE IF EXISTS "{old}"'))
        return dropped

    def convert_vectors(
        self, conn: Connection, old: str, new: str, kind: str, dims: int, elements_: tuple[str, str]
    ) -> int:
        # One pass over the old table (vec0 reads it row by row: ~14 s at
        # 100k rows, once), then the old table is dropped.
        was, now = elements_
        conn.execute(text(f'DROP TABLE IF EXISTS "{new}"'))
        conn.execute(text(vec0_ddl(new, kind, dims, now)))
        cols = ("user_id", *_FILTERS[kind])
        names = ", ".join(["rowid", *cols, "embedding"])
        marks = ", ".join([":rowid", *(f":{c}" for c in cols), _bind(now, ":embedding")])
        ins = text(f'INSERT INTO "{new}"({names}) VALUES ({marks})')
        rows = conn.execute(text(f'SELECT {names} FROM "{old}"'))
        n = 0
        while batch := rows.fetchmany(500):
            out = []
            for r in batch:
                vec = elements.decode(bytes(r[-1]), was, dims)
                out.append(
                    {
                        "rowid": int(r[0]),
                        **dict(zip(cols, r[1:-1], strict=True)),
                        "embedding": elements.encode(vec, now, dims),
                    }
                )
            conn.execute(ins, out)  # another table than the one being read
            n += len(out)
        conn.execute(text(f'DROP TABLE IF EXISTS "{old}"'))
        return n

    def compact_after_erasure(self, db: Storage, *, wait_s: float, full: bool) -> CompactionResult:
        # VACUUM (once; the marker records it), then checkpoint with TRUNCATE
        # until no reader is in the way or the time runs out, and only then
        # delete the marker: the checkpoint copies the vacuumed image over
        # every page of the file and truncates the WAL. SQLite's VACUUM always
        # rewrites the file, so ``full`` changes nothing.
        deadline = time.monotonic() + max(wait_s, 0.0)
        with db.exclusive_connection() as sa_conn:
            raw: Any = sa_conn.connection.dbapi_connection
            try:
                if not vacuum_once(raw):
                    return CompactionResult(True)
                if not truncate_wal(raw, deadline, db.busy_timeout_ms):
                    return CompactionResult(
                        False,
                        "another connection holds a read transaction on an older snapshot, so "
                        "the write-ahead log could not be truncated; the erased bytes stay in "
                        "the file until it ends (the next open, close or write of the store "
                        "finishes the job)",
                    )
                # No erased byte is left now; the marker's own deletion holds none.
                raw.execute("DELETE FROM erasure_compaction WHERE id = 1")
            except db.driver_errors as e:  # locked past busy_timeout, I/O
                return CompactionResult(False, f"compaction did not finish: {e}")
        return CompactionResult(True)

    def versions(self, db: Storage) -> dict[str, Any]:
        with db.read() as conn:
            out: dict[str, Any] = {
                "sqlite_vec": str(conn.exec_driver_sql("select vec_version()").scalar())
            }
            conn.exec_driver_sql("CREATE VIRTUAL TABLE temp.doctor_fts USING fts5(x)")
        out["fts5"] = True
        return out

    def size_bytes(self, db: Storage) -> int:
        # The file after folding the WAL in, plus what is left of the WAL (a
        # checkpoint cannot run inside a transaction).
        with db.exclusive_connection() as conn:
            raw: Any = conn.connection.dbapi_connection
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = db.path.with_name(db.path.name + "-wal")
        return db.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def _fts_hash_size(conn: Connection, table: str, size: int | None) -> int | None:
    """Set FTS5 table ``table``'s ``hashsize`` (None: its default, with no
    setting left in its config table); returns the setting it had."""
    was = conn.exec_driver_sql(f"SELECT v FROM {table}_config WHERE k = 'hashsize'").scalar()
    # Through FTS5's command, which every connection's cached copy of the
    # setting follows; a row deleted by hand would not be noticed by them.
    value = _FTS_DEFAULT_HASH_BYTES if size is None else int(size)
    conn.exec_driver_sql(f"INSERT INTO {table}({table}, rank) VALUES ('hashsize', {value})")
    if size is None:
        conn.exec_driver_sql(f"DELETE FROM {table}_config WHERE k = 'hashsize'")
    return None if was is None else int(was)
