"""vec0 as the one stored copy of each vector, and migration 0013."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memstore import Settings
from memstore.db import migrate
from memstore.db.engine import SqliteDatabase
from memstore.store import Store, default_projections


def _counting(store: Store) -> list[int]:
    calls: list[int] = []
    assert store._embedder is not None
    original = store._embedder.embed_documents

    def counting(texts):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        return original(texts)

    store._embedder.embed_documents = counting  # type: ignore[method-assign]
    return calls


def _vec_ddl(db_path: Path) -> list[str]:
    db = SqliteDatabase(db_path)
    try:
        with db.read() as conn:
            return [
                str(r[0])
                for r in conn.exec_driver_sql(
                    "SELECT sql FROM sqlite_master WHERE sql LIKE '%USING vec0%'"
                )
            ]
    finally:
        db.close()


def test_migration_0013_keeps_vectors_and_drops_the_second_copy(
    db_path: Path, settings: Settings
) -> None:
    with Store.open(db_path, settings=settings) as s:
        s.capture_turn("alice", "s1", "My cat is called Mochi and she loves tuna", "Cute!")
        s.capture_turn("alice", "s2", "I am planning a hiking trip to the Alps", "Fun")
        s.capture_turn("bob", "s1", "My dog is called Rex", "ok")
        s.reindex()
        before = [
            (h.text, h.similarity)
            for h in s.search_conversations("alice", "cat", strategy="vector")
        ]
    db = SqliteDatabase(db_path)
    try:
        migrate.downgrade(db, "0010", owners=migrate.projection_tables(default_projections()))
        # A file of that revision: 256-slot chunks and a cache holding vectors.
        with db.write() as conn:
            conn.exec_driver_sql(
                "INSERT INTO embedding_cache VALUES ('hashing-x', 'h1', 4, zeroblob(16))"
            )
    finally:
        db.close()
    assert all("chunk_size=256" in ddl for ddl in _vec_ddl(db_path))

    with Store.open(db_path, settings=settings) as s:
        after = [
            (h.text, h.similarity)
            for h in s.search_conversations("alice", "cat", strategy="vector")
        ]
        assert after == before
        calls = _counting(s)  # documents only: the query above was embedded
        s.reindex()
        assert calls == []
        with s._db.read() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM embedding_cache").scalar_one() == 0
            rewrites = conn.exec_driver_sql("SELECT rewrites FROM vector_spaces").scalars().all()
            assert rewrites and set(rewrites) == {0}
    ddls = _vec_ddl(db_path)
    assert any("vec_l0" in d and "chunk_size=128" in d for d in ddls)
    assert any("vec_l1" in d and "chunk_size=32" in d for d in ddls)
    assert not any("chunk_size=256" in d for d in ddls)


def test_an_index_behind_keeps_the_cache_and_uses_it_once(
    db_path: Path, settings: Settings
) -> None:
    with Store.open(db_path, settings=settings) as s:
        s.capture_turn("alice", "s1", "My cat is called Mochi and she loves tuna", "Cute!")
        s.reindex()
        assert s._embedder is not None
        with s._db.read() as conn:
            ids = [r[0] for r in conn.exec_driver_sql("SELECT id FROM l0_messages")]
    db = SqliteDatabase(db_path)
    try:
        migrate.downgrade(db, "0010", owners=migrate.projection_tables(default_projections()))
        with db.write() as conn:
            # As an older version left it: the vectors in the cache too, and the
            # index not caught up (its vec0 rows gone, cursor back at 0).
            (table,) = conn.exec_driver_sql(
                "SELECT table_name FROM vector_spaces WHERE kind = 'l0'"
            ).one()
            conn.exec_driver_sql(f'DELETE FROM "{table}"')
            conn.exec_driver_sql("UPDATE vector_spaces SET cursor = 0, ready = 0")
    finally:
        db.close()
    with Store.open(db_path, settings=settings) as s:
        assert s._embedder is not None
        # the cache rows an older version wrote (same model, context hash)
        from memstore.embeddings import content_hash

        with s._db.write() as conn:
            texts = ["My cat is called Mochi and she loves tuna\nCute!"]
            conn.exec_driver_sql(
                "INSERT INTO embedding_cache VALUES (?, ?, ?, ?)",
                (
                    s._embedder.model_id,
                    content_hash(texts[0]),
                    s._embedder.dimensions,
                    np.full(s._embedder.dimensions, 0.5, dtype=np.float32).tobytes(),
                ),
            )
        calls = _counting(s)
        s.reindex()
        # The first message had no context: embedded once (no legacy row for it);
        # the reply's vector came from the cache and left it.
        assert calls == [1]
        with s._db.read() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM embedding_cache").scalar_one() == 0
            (table,) = conn.exec_driver_sql(
                "SELECT table_name FROM vector_spaces WHERE kind = 'l0'"
            ).one()
            got = conn.exec_driver_sql(
                f'SELECT embedding FROM "{table}" WHERE rowid = ?', (ids[1],)
            ).scalar_one()
        assert np.allclose(np.frombuffer(got, dtype=np.float32), 0.5)


def test_a_vector_filed_under_another_user_never_shows_their_row(store: Store) -> None:
    # Defence in depth: were a vector ever left under the wrong partition
    # (ids renumbered under it), search still returns only the asker's rows.
    store.capture_turn("alice", "s1", "alice keeps her diary in a red notebook", "ok")
    store.reindex()
    with store._db.write() as conn:
        table, element = conn.exec_driver_sql(
            "SELECT table_name, element FROM vector_spaces WHERE kind = 'l0'"
        ).one()
        rid, vec = conn.exec_driver_sql(
            f'SELECT rowid, embedding FROM "{table}" WHERE rowid = '
            "(SELECT min(id) FROM l0_messages WHERE user_id = 'alice')"
        ).one()
        conn.exec_driver_sql(f'DELETE FROM "{table}" WHERE rowid = ?', (rid,))
        value = "vec_int8(?)" if element == "int8" else "?"
        conn.exec_driver_sql(
            f'INSERT INTO "{table}"(rowid, user_id, session_id, embedding) '
            f"VALUES (?, 'mallory', 's1', {value})",
            (rid, vec),
        )
    for strategy in ("vector", "hybrid"):
        hits = store.search_conversations("mallory", "red notebook diary", strategy=strategy)
        assert hits == []
