"""Erasure down to the data files: with ``vacuum_full`` no file of
the store's tables, TOAST tables or indexes holds a byte of the erased user's
text afterwards. On PostgreSQL that needs ``VACUUM FULL`` (a plain VACUUM
leaves dead tuples' bytes in place until overwritten); SQLite's VACUUM always
rewrites its file, and the flag changes nothing there."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Connection

from memstore.store import Store
from tests.backends import pg_admin_url

# Distinctive, so it cannot occur by chance; lower case because the full-text
# index keeps lexemes in lower case ("quetzalcoatlus" would be its stem).
SECRET = "quetzalcoatlus"


def _fill(store: Store) -> None:
    for i in range(30):
        store.capture_turn("alice", "s1", f"I like green tea, cup {i}", "noted", turn_id=f"a{i}")
    for i in range(5):
        store.capture_turn(
            "bob", "s9", f"My {SECRET} kite number {i} flies", "nice", turn_id=f"b{i}"
        )
    store.write_memory("bob", "add", f"Bob flies a {SECRET} kite", type="persona")


def _store_files(store: Store) -> list[Path]:
    """Every data file of the store: the SQLite file and its WAL, or on
    PostgreSQL each relation of the store's schema (tables, their TOAST
    tables, all indexes), all segments, after a CHECKPOINT wrote shared
    buffers out."""
    if store._db.dialect == "sqlite":
        path = Path(store._db.path)
        return [p for p in (path, Path(f"{path}-wal")) if p.exists()]
    with store._db.engine.connect() as raw:
        conn: Connection = raw.execution_options(isolation_level="AUTOCOMMIT")
        conn.exec_driver_sql("CHECKPOINT")
        data = Path(str(conn.exec_driver_sql("SHOW data_directory").scalar()))
        rels = [
            str(r[0])
            for r in conn.exec_driver_sql(
                """
                WITH mine AS (
                    SELECT c.oid, c.reltoastrelid FROM pg_class c
                    JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i', 'm')
                ), toast AS (
                    SELECT reltoastrelid AS oid FROM mine WHERE reltoastrelid <> 0
                    UNION SELECT indexrelid FROM pg_index
                    WHERE indrelid IN (SELECT reltoastrelid FROM mine)
                )
                SELECT pg_relation_filepath(oid) FROM (
                    SELECT oid FROM mine UNION SELECT oid FROM toast
                ) r WHERE pg_relation_filepath(oid) IS NOT NULL
                """
            )
        ]
    files = []
    for rel in rels:
        base = data / rel
        files += [
            p for p in base.parent.glob(f"{base.name}*") if not p.name.endswith(("_fsm", "_vm"))
        ]
    assert files
    return files


def _holding(files: list[Path], needle: str) -> list[str]:
    return [p.name for p in files if needle.encode() in p.read_bytes().lower()]


@contextmanager
def _old_transaction_elsewhere(store: Store) -> Iterator[None]:
    """On PostgreSQL, a transaction with an xid in *another* database, open
    across the erasure (as a long job of another tenant of the server would
    be): VACUUM FULL alone then copies the erased rows into its new files."""
    admin = pg_admin_url()
    if store._db.dialect != "postgresql" or admin is None:
        yield
        return
    import psycopg

    with psycopg.connect(admin.replace("postgresql+psycopg://", "postgresql://", 1)) as other:
        other.execute("SELECT txid_current()")  # an xid, held until the block ends
        yield
        other.rollback()


def test_vacuum_full_leaves_no_erased_byte_in_the_data_files(store: Store) -> None:
    _fill(store)
    assert _holding(_store_files(store), SECRET)  # the check sees the text while it lives
    with _old_transaction_elsewhere(store):
        report = store.forget_user("bob", vacuum_full=True)
    assert report.compacted, report.detail
    assert _holding(_store_files(store), SECRET) == []
    assert len(store.search_conversations("alice", "green tea", strategy="keyword")) > 0
    if store._db.dialect == "postgresql":
        assert "VACUUM FULL" in report.detail


def test_compacted_is_false_while_erased_bytes_remain_in_the_files(store: Store) -> None:
    """``compacted`` means the same on both backends: True only when no byte
    of the erased text is left in the database's files."""
    _fill(store)
    report = store.forget_user("bob")
    left = _holding(_store_files(store), SECRET)
    assert report.compacted == (left == []), (report.compacted, left, report.detail)
    if store._db.dialect == "postgresql":
        # A plain VACUUM leaves the dead rows' bytes in the data files (read
        # above): not compacted, and the report points at the option.
        assert left and report.compacted is False
        assert "vacuum_full=True" in report.detail
    else:
        assert report.compacted and left == []  # SQLite's VACUUM rewrites the file
