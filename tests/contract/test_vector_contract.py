"""Vector and hybrid search, the same on SQLite (vec0) and PostgreSQL (pgvector).

The hashing embedder is deterministic, so both backends hold the same vectors
and must return the same exact nearest neighbours.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from memstore import Settings
from memstore.db.backend import pgvector as vector_pg
from memstore.store import Store
from memstore.vectors import spaces


@pytest.fixture(params=["int8", "float32"])
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """Both element types of SQLite vector spaces (PostgreSQL: float32 either way)."""
    return settings.replace(vector_element=request.param)


def _turns(store: Store) -> None:
    store.capture_turn("alice", "s1", "I like green tea in the morning", "noted", turn_id="a1")
    store.capture_turn("alice", "s1", "I am allergic to peanuts", "I will remember", turn_id="a2")
    store.capture_turn("bob", "s9", "My dog is called Rex", "nice dog", turn_id="b1")
    store.write_memory("alice", "add", "Alice drinks green tea", type="persona")
    store.write_memory("bob", "add", "Bob has a dog named Rex", type="persona")


def _vector_rows(store: Store) -> dict[str, list[tuple[int, str]]]:
    """(id, user) of every stored vector, per space kind."""
    out: dict[str, list[tuple[int, str]]] = {}
    with store._db.read() as conn:
        for sp in spaces.list_spaces(conn):
            key = "id" if store._db.dialect == "postgresql" else "rowid"
            rows = conn.execute(text(f'SELECT {key}, user_id FROM "{sp.table_name}"')).all()
            out[sp.kind] = sorted((int(r[0]), str(r[1])) for r in rows)
    return out


def test_vector_and_hybrid_search_find_the_message(store: Store) -> None:
    _turns(store)
    assert store.reindex() > 0
    status: Any = store.embedding_status()
    assert status["l0"]["ready"] and status["l0"]["pending"] == 0
    assert status["l1"]["ready"] and status["l1"]["pending"] == 0
    hits = store.search_conversations("alice", "allergic to peanuts", strategy="vector")
    # Context vectors: the reply's vector holds the message before it, so the
    # message and its reply are the two nearest, in either order.
    assert {h.text for h in hits[:2]} == {"I am allergic to peanuts", "I will remember"}
    assert [h.vector_rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(h.keyword_rank is None for h in hits)
    assert hits[0].similarity is not None and 0.0 < hits[0].similarity <= 1.0
    assert all(h.user_id == "alice" and h.kind == "l0" for h in hits)
    hybrid = store.search_conversations("alice", "allergic to peanuts")
    assert hybrid[0].text == "I am allergic to peanuts"
    assert hybrid[0].vector_rank is not None and hybrid[0].keyword_rank == 1
    mem = store.search_memories("alice", "green tea", strategy="vector")
    assert [m.text for m in mem] == ["Alice drinks green tea"]
    assert mem[0].kind == "l1" and mem[0].type == "persona" and mem[0].vector_rank == 1
    assert store.search_memories("alice", "green tea", type="episodic") == []
    # Another user's rows never come back, whatever the strategy.
    for strategy in ("vector", "hybrid"):
        got = store.search_conversations("alice", "dog Rex", strategy=strategy)
        assert all(h.user_id == "alice" for h in got)


def _say(store: Store, user: str, texts: list[str], session: str = "s") -> None:
    """One capture of many user messages (quicker than a turn each)."""
    msgs = [{"role": "user", "content": t, "id": f"{session}-{i}"} for i, t in enumerate(texts)]
    store.capture(user, session, msgs)


def test_a_filtered_knn_returns_limit_rows_when_they_exist(store: Store) -> None:
    """Many users and one small one: the small user's KNN is not starved by
    the others' rows (an HNSW index filtered after the fact returns too few)."""
    for u in range(25):
        _say(store, f"u{u}", [f"user {u} talks about topic {t} and tea" for t in range(16)])
    _say(store, "small", [f"small one mentions item {t} with tea" for t in range(12)])
    _say(store, "tiny", ["tiny says tea once", "ok"])
    store.reindex()
    for strategy in ("vector", "hybrid"):
        hits = store.search_conversations("small", "tea", strategy=strategy, limit=10)
        assert len(hits) == 10 and all(h.user_id == "small" for h in hits)
    # Fewer than limit exist: all of them (the content-free "ok" never
    # answers a query with content).
    hits = store.search_conversations("tiny", "tea", strategy="vector", limit=10)
    assert [h.text for h in hits] == ["tiny says tea once"]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_an_hnsw_index_added_by_hand_does_not_starve_a_small_user(store: Store) -> None:
    """PostgreSQL: with an HNSW index on a space's table and a planner that
    picks it (forced here with enable_sort = off), a plain filtered KNN walks
    ef_search (40) candidates of every user and filters after: the small user
    gets few or none. The engine's query reads the user's rows first."""
    for u in range(25):
        _say(store, f"u{u}", [f"user {u} writes line {t}" for t in range(16)])
    _say(store, "small", [f"small one mentions item {t}" for t in range(12)])
    store.reindex()
    with store._db.write() as conn:
        (sp,) = [s for s in spaces.list_spaces(conn) if s.kind == "l0"]
        table = sp.table_name
        conn.execute(text(f'CREATE INDEX ON "{table}" USING hnsw (embedding vector_cosine_ops)'))
        conn.execute(text("SET LOCAL enable_sort = off"))
        # A query vector among the other users' rows.
        blob = vector_pg.by_id(
            conn,
            table,
            [
                conn.execute(
                    text("SELECT min(id) FROM l0_messages WHERE user_id = 'u0'")
                ).scalar_one()
            ],
        ).popitem()[1]
        plain = conn.execute(
            text(
                f'SELECT id FROM "{table}" WHERE user_id = :u '
                "ORDER BY embedding <=> CAST(:q AS vector) LIMIT 10"
            ),
            {"u": "small", "q": vector_pg.literal(blob)},
        ).all()
        assert len(plain) < 10  # the failure guarded against
        got = vector_pg.knn(conn, table, "l0", "small", blob, 10, {})
    assert len(got) == 10
    with store._db.read() as conn:
        owners = conn.execute(
            text("SELECT DISTINCT user_id FROM l0_messages WHERE id = ANY(:i)"),
            {"i": [i for i, _ in got]},
        ).all()
    assert owners == [("small",)]


def test_both_backends_rank_the_same(store: Store) -> None:
    """Exact KNN on both: similarities come sorted, filters apply inside it."""
    for s_ in range(3):
        _say(
            store, "alice", [f"note {t}: the {t % 7} red boxes" for t in range(s_, 40, 3)], f"s{s_}"
        )
    store.reindex()
    hits = store.search_conversations("alice", "three red boxes", strategy="vector", limit=10)
    sims = [h.similarity for h in hits]
    assert len(hits) == 10 and sims == sorted(sims, reverse=True)
    one_session = store.search_conversations(
        "alice", "red boxes", strategy="vector", session_id="s1", limit=10
    )
    assert len(one_session) == 10 and all(h.session_id == "s1" for h in one_session)


def test_erasure_removes_the_users_vectors_and_keeps_the_others(store: Store) -> None:
    _turns(store)
    store.reindex()
    before = store.search_conversations("alice", "green tea", strategy="vector")
    rows = _vector_rows(store)
    assert any(u == "bob" for (u,) in [(r[1],) for r in rows["l0"]])
    store.forget_user("bob")
    rows = _vector_rows(store)
    assert rows["l0"] and all(u == "alice" for _, u in rows["l0"])
    assert rows["l1"] and all(u == "alice" for _, u in rows["l1"])
    # The survivors moved to their rows' new ids; nothing is embedded again.
    status: Any = store.embedding_status()
    assert status["l0"]["pending"] == 0 and status["l1"]["pending"] == 0
    after = store.search_conversations("alice", "green tea", strategy="vector")
    assert [(h.text, h.similarity) for h in after] == [(h.text, h.similarity) for h in before]
    assert store.search_conversations("bob", "dog Rex", strategy="vector") == []


def test_rebuild_keeps_vectors_searchable(store: Store) -> None:
    _turns(store)
    store.reindex()
    before = store.search_conversations("alice", "peanuts", strategy="vector")
    rows = _vector_rows(store)
    store.rebuild()
    assert _vector_rows(store) == rows
    status: Any = store.embedding_status()
    assert status["l0"]["pending"] == 0
    after = store.search_conversations("alice", "peanuts", strategy="vector")
    assert [(h.ref, h.similarity) for h in after] == [(h.ref, h.similarity) for h in before]


def test_large_partitions_are_searched_in_memory_with_the_same_answer(store: Store) -> None:
    _say(store, "big", [f"entry {t} about {t % 9} blue cups" for t in range(60)])
    store.reindex()
    exact = store.search_conversations("big", "blue cups", strategy="vector", limit=10)
    # The first search was vec0's; the copy loads in the background meanwhile.
    store._search_engine.hot.wait()
    hot = store.search_conversations("big", "blue cups", strategy="vector", limit=10)
    assert store._search_engine.hot.cached_users()
    # The same exact ranking (rows at equal distance may come in either order).
    assert [h.similarity for h in hot] == pytest.approx([h.similarity for h in exact], abs=1e-5)
    assert hot[0].ref == exact[0].ref
    # New messages reach the copy (read past its cursor).
    _say(store, "big", ["a brand new blue cups entry"], "s2")
    store.reindex()
    got = store.search_conversations("big", "brand new blue cups", strategy="vector")
    assert got[0].text == "a brand new blue cups entry"


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_vectors_reach_pgvector_bit_for_bit(store: Store) -> None:
    """The text form ``write`` sends (nine significant digits) parses back to
    the very float32s, extremes and signed zero included."""
    rng = np.random.default_rng(7)
    vecs = [rng.standard_normal(8).astype("<f4") for _ in range(50)]
    vecs.append(np.array([0.0, -0.0, 3.4028235e38, -1.1754944e-38, 1 / 3, 1e-7, -2.5, 7], "<f4"))
    with store._db.write() as conn:
        vector_pg.create(conn, "t_roundtrip", "l0", 8)
        vector_pg.write(
            conn,
            "t_roundtrip",
            "l0",
            [{"id": i, "u": "u", "m0": "s", "v": v.tobytes()} for i, v in enumerate(vecs)],
        )
        back = vector_pg.by_id(conn, "t_roundtrip", list(range(len(vecs))))
    for i, v in enumerate(vecs):
        assert back[i] == v.tobytes(), (i, np.frombuffer(back[i], "<f4"), v)
