"""PostgreSQL: a weighted tsvector with a GIN index for keywords, pgvector
tables for vectors (memstore.db.backend.pgvector), VACUUM for erasure.

Writes are serialised by an advisory lock (memstore.db.postgres says why);
claiming queued work runs beside the writers, with ``FOR UPDATE`` row locks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, exc, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import dml as pg_dml
from sqlalchemy.dialects.sqlite import dml as sqlite_dml
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement

from memstore.db.backend import pgvector
from memstore.db.backend.base import Backend, CompactionResult, Partition, Storage
from memstore.errors import StorageError

if TYPE_CHECKING:
    from memstore.db.backend.base import Array


# The parts build upserts with ``memstore.db.backend.upsert``, SQLite's
# ``insert().on_conflict_do_*``. SQLite
# took its upsert syntax from PostgreSQL (``ON CONFLICT (cols) DO UPDATE SET
# ... excluded.col`` / ``DO NOTHING``), so each becomes the equal PostgreSQL
# clause here; without this SQLAlchemy's PostgreSQL compiler fails on the
# SQLite construct. (The contract suite runs these upserts on both engines.)
@compiles(sqlite_dml.OnConflictDoUpdate, "postgresql")
def _upsert_update(element: Any, compiler: Any, **kw: Any) -> str:
    clause = pg_dml.OnConflictDoUpdate(
        index_elements=element.inferred_target_elements,
        index_where=element.inferred_target_whereclause,
        set_=dict(element.update_values_to_set),
        where=element.update_whereclause,
    )
    return str(compiler.process(clause, **kw))


@compiles(sqlite_dml.OnConflictDoNothing, "postgresql")
def _upsert_nothing(element: Any, compiler: Any, **kw: Any) -> str:
    clause = pg_dml.OnConflictDoNothing(
        index_elements=element.inferred_target_elements,
        index_where=element.inferred_target_whereclause,
    )
    return str(compiler.process(clause, **kw))


# Tables vacuumed after an erasure: all but the two bookkeeping ones, since
# erasure replays every projection.
_NOT_VACUUMED = ("alembic_version", "erasure_compaction")


def vacuum(db: Storage, tables: list[str] | None = None, *, full: bool = False) -> None:
    """``VACUUM`` (or ``VACUUM FULL``) the given tables, or all of them.

    After a DELETE the rows are dead tuples: invisible to every query, but
    their bytes stay in the table's pages until VACUUM (or autovacuum, on
    its own schedule: by default once about 20% of a table is dead) marks
    the space reusable and later writes overwrite it — until then a
    superuser reading the data files, or a file-level backup, still sees
    them. ``VACUUM FULL`` rewrites each table (and its TOAST table and
    indexes) into new files and drops the old ones, so no erased row is
    left in a live data file — at the price of an ACCESS EXCLUSIVE lock on
    each table while it runs (every reader and writer of the store waits)
    and room for a second copy. Neither scrubs the write-ahead log
    (recycled after checkpoints), archived WAL, replicas' own files or the
    filesystem's freed blocks. A transaction that started before the
    DELETE keeps the dead rows it may see until it ends (VACUUM leaves
    them; VACUUM FULL waits for it, up to ``lock_timeout``). The replaced
    statistics rows are dead tuples of the ``pg_statistic`` catalog until
    autovacuum gets to it.
    """
    # ANALYZE as well: column statistics (pg_statistic's most common
    # values) are samples of the rows, erased text included, until redone.
    target = ", ".join(f'"{t}"' for t in tables) if tables else ""
    # A plain VACUUM first, also before FULL: VACUUM FULL runs under a
    # snapshot whose horizon any transaction on the *server* (any
    # database) older than the erasure holds back, and it copies such
    # "recently dead" rows into the new files (measured: 70 of 70 erased
    # rows kept while another database ran a long INSERT). A plain
    # VACUUM's horizon counts only this database's transactions, so it
    # removes them, and FULL then rewrites the pages without them.
    verbs = ["VACUUM (ANALYZE)"] + (["VACUUM (FULL)"] if full else [])
    try:
        with db.engine.connect() as raw:
            conn = raw.execution_options(isolation_level="AUTOCOMMIT")
            for verb in verbs:
                conn.exec_driver_sql(f"{verb} {target}".strip())
    except exc.DBAPIError as e:
        raise db.translate_error(e, "vacuum") from e


class PostgresBackend(Backend):
    name = "postgresql"
    keyword_index = "tsvector"
    merges_fts = False  # GIN indexes have no segments to merge

    def json_text(self, column: Any, key: str) -> ColumnElement[Any]:
        return column.cast(JSONB)[key].astext  # type: ignore[no-any-return]

    def json_text_sql(self, column: str, key: str) -> str:
        return f"(CAST({column} AS JSONB) ->> '{key}')"

    def by_primary_key(self, column: str) -> str:
        return column  # plans by statistics; and there is no unary plus for text

    def claim_lock(self) -> str:
        return " FOR UPDATE"

    def claim_skip_locked(self) -> str:
        return " FOR UPDATE SKIP LOCKED"

    def fts_clear(self, conn: Connection, table: str, *, contentless: bool) -> None:
        conn.execute(text(f"DELETE FROM {table}"))

    def fts_optimize(self, conn: Connection, table: str) -> None:
        pass  # a GIN index keeps no deleted row's terms past VACUUM (compaction)

    def fts_merge_step(self, conn: Connection, table: str, pages: int, usermerge: int) -> bool:
        return False

    @contextmanager
    def bulk_load(
        self, conn: Connection, deferred_indexes: Sequence[str], fts_tables: Sequence[str] = ()
    ) -> Iterator[None]:
        yield  # a replay loads as it is

    # pgvector's ``vector`` (float32) only: memstore.vectors.spaces records
    # float32 for every space made here, so ``element`` below is always that.
    vector_elements = ("float32",)

    def create_vector_table(
        self, conn: Connection, table: str, kind: str, dims: int, element: str = "float32"
    ) -> None:
        pgvector.create(conn, table, kind, dims)

    def write_vectors(
        self,
        conn: Connection,
        table: str,
        kind: str,
        rows: list[dict[str, Any]],
        element: str = "float32",
    ) -> None:
        pgvector.write(conn, table, kind, rows)

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
        return pgvector.knn(conn, table, kind, user_id, query, k, filters)

    def vectors_by_id(
        self, conn: Connection, table: str, ids: list[int], element: str = "float32"
    ) -> dict[int, bytes]:
        return pgvector.by_id(conn, table, ids)

    def vector_partition(
        self, conn: Connection, table: str, user_id: str, dims: int, element: str = "float32"
    ) -> Partition:
        ids, mat = pgvector.partition(conn, table, user_id, dims)
        return Partition(ids, [mat] if len(ids) else [], None)

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
        ids, mat = pgvector.partition(conn, table, user_id, dims, after=after, upto=upto)
        # The session of each row is read by the caller when it needs them.
        return ids, mat, None

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
        before = pgvector.count(conn, old)
        conn.execute(text(f'DROP TABLE IF EXISTS "{new}"'))
        return before - pgvector.copy_moved(conn, old, new, kind, dims, moved)

    def compact_after_erasure(self, db: Storage, *, wait_s: float, full: bool) -> CompactionResult:
        # Vacuum the tables that held the user's rows, then clear the marker.
        # ``wait_s`` does not apply: VACUUM FULL waits up to lock_timeout.
        try:
            with db.read() as conn:
                pending = conn.exec_driver_sql("SELECT 1 FROM erasure_compaction").first()
                names = [
                    str(r[0])
                    for r in conn.exec_driver_sql(
                        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                    )
                ]
            if pending is None:
                return CompactionResult(True, "")
            vacuum(db, [n for n in names if n not in _NOT_VACUUMED], full=full)
            with db.write() as conn:
                conn.exec_driver_sql("DELETE FROM erasure_compaction")
        except StorageError as e:  # VACUUM FULL waited past lock_timeout for a reader
            return CompactionResult(False, f"compaction did not finish: {e}")
        # Only VACUUM FULL rewrites the files; after a plain VACUUM the dead
        # rows' bytes stay until PostgreSQL reuses their space.
        return CompactionResult(
            True,
            residue=not full,
            detail="VACUUM FULL done: the tables were rewritten without the erased rows"
            if full
            else (
                "VACUUM done: the erased rows are dead tuples whose space PostgreSQL reuses, but "
                "their bytes stay in the data files until overwritten; vacuum_full=True (CLI: "
                "--vacuum-full) rewrites the tables instead"
            ),
        )

    def versions(self, db: Storage) -> dict[str, Any]:
        with db.read() as conn:
            server = conn.exec_driver_sql("SHOW server_version").scalar()
        return {"postgresql": server, "pgvector": db.vec_version()}

    def size_bytes(self, db: Storage) -> int:
        with db.read() as conn:
            return int(
                conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            )
