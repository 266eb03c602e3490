"""Large partitions searched in memory (memstore.vectors.hot) against vec0."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from memstore import Settings
from memstore.store import Store
from memstore.vectors.hot import HotPartitions, _load


@pytest.fixture(params=["int8", "float32"])
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """Both element types of SQLite vector spaces (PostgreSQL: float32 either way)."""
    return settings.replace(vector_element=request.param)


pytestmark = pytest.mark.both_backends

TEXTS = [
    "My cat is called Mochi and she loves tuna",
    "I am planning a hiking trip to the Alps in June",
    "The dentist appointment moved to Thursday",
    "We adopted a second cat, a grey kitten",
    "My sister lives in Lisbon and teaches piano",
    "I started learning to bake sourdough bread",
]


def _fill(store: Store, user: str, n: int, session: str = "s1") -> None:
    for i in range(n):
        store.capture_turn(user, f"{session}{i % 2}", f"{TEXTS[i % len(TEXTS)]} ({i})", "ok")


def _vector(store: Store, query: str, user: str, **kw: str) -> list[tuple[str, float | None]]:
    hits = store.search_conversations(user, query, strategy="vector", limit=10, **kw)
    return [(h.text, h.similarity) for h in hits]


@pytest.fixture
def two_users(store: Store) -> Store:
    _fill(store, "big", 12)
    _fill(store, "small", 3)
    store.reindex()
    return store


def test_memory_search_ranks_like_vec0(two_users: Store) -> None:
    s = two_users
    on_vec0 = _vector(s, "cat kitten", "big")
    s._search_engine.hot = HotPartitions(min_rows=8)
    in_memory = _vector(s, "cat kitten", "big")
    assert s._search_engine.hot.cached_users() != []
    assert [t for t, _ in in_memory] == [t for t, _ in on_vec0]
    for (_, a), (_, b) in zip(in_memory, on_vec0, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    # a small partition stays on vec0
    _vector(s, "cat", "small")
    assert [u for _, u in s._search_engine.hot.cached_users()] == ["big"]


def test_both_paths_give_equal_scores_bit_for_bit(two_users: Store) -> None:
    """The same rows score the same whether the engine's KNN or the copy
    answered: equal messages must not swap places between two calls."""
    s = two_users

    def ranked() -> list[tuple[int, float, float | None]]:
        hits = s.search_conversations("big", "cat kitten", strategy="vector", limit=10)
        return [(h.id, h.score, h.similarity) for h in hits]

    on_engine = ranked()
    s._search_engine.hot = HotPartitions(min_rows=8)
    in_memory = ranked()
    assert s._search_engine.hot.cached_users() != []
    assert in_memory == on_engine


def test_memory_search_keeps_users_and_sessions_apart(two_users: Store) -> None:
    s = two_users
    s._search_engine.hot = HotPartitions(min_rows=2)
    for user in ("big", "small"):
        hits = s.search_conversations(user, "cat", strategy="vector", limit=20)
        assert hits and all(h.user_id == user for h in hits)
    hits = s.search_conversations("big", "cat", strategy="vector", session_id="s11")
    assert hits and all(h.session_id == "s11" for h in hits)


def test_new_vectors_join_a_loaded_partition(two_users: Store) -> None:
    s = two_users
    s._search_engine.hot = HotPartitions(min_rows=5)
    _vector(s, "cat", "big")
    s.capture_turn("big", "s9", "Our parrot Kiwi whistles the national anthem", "ok")
    s.reindex()
    hits = s.search_conversations("big", "parrot whistles anthem", strategy="vector")
    assert hits[0].text.startswith("Our parrot Kiwi")
    in_memory = _vector(s, "parrot", "big")
    s._search_engine.hot = HotPartitions(min_rows=10_000)
    on_vec0 = _vector(s, "parrot", "big")
    # same neighbours and similarities (ties may come in another order)
    assert sorted((round(b or 0, 4), t) for t, b in in_memory) == sorted(
        (round(b or 0, 4), t) for t, b in on_vec0
    )


def test_erasure_drops_memory_copies_and_keeps_other_vectors(two_users: Store) -> None:
    s = two_users
    s._search_engine.hot = HotPartitions(min_rows=2)
    _vector(s, "cat", "big")
    _vector(s, "cat", "small")
    before = _vector(s, "cat", "small")
    calls: list[int] = []
    assert s._embedder is not None
    original = s._embedder.embed_documents

    def counting(texts):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        return original(texts)

    s._embedder.embed_documents = counting  # type: ignore[method-assign]
    s.forget_user("big")
    # the other user's vectors were carried over to their new row ids: same
    # answers at once, nothing embedded again, and the erased copy left memory
    assert _vector(s, "cat", "small") == before
    assert [u for _, u in s._search_engine.hot.cached_users()] == ["small"]
    assert s.search_conversations("big", "cat", strategy="vector") == []
    s.reindex()
    assert calls == []


def test_a_late_vector_below_the_cursor_reloads_the_copy(store: Store) -> None:
    from memstore.vectors import quarantine
    from tests.pipeline_support import FakeClock
    from tests.reliability.test_reliability_indexer import Flaky, _indexer

    assert store._embedder is not None
    clock = FakeClock()
    store.capture_turn("big", "s1", "REJECT the lighthouse keeper's logbook", "ok")
    _fill(store, "big", 6)
    flaky = Flaky(store._embedder)
    _indexer(store, flaky, clock).run_until_idle()
    store._search_engine.hot = HotPartitions(min_rows=5)
    texts = [t for t, _ in _vector(store, "lighthouse keeper logbook", "big")]
    assert "REJECT the lighthouse keeper's logbook" not in texts  # quarantined, no vector
    clock.advance(quarantine.FIRST_RETRY_S + 1)
    flaky.healed = True
    _indexer(store, flaky, clock).run_until_idle()  # written below the cursor
    hits = _vector(store, "lighthouse keeper logbook", "big")
    assert hits[0][0] == "REJECT the lighthouse keeper's logbook"


def test_a_copy_newer_than_the_callers_snapshot_is_not_used(two_users: Store) -> None:
    s = two_users
    engine = s._search_engine
    engine.hot = HotPartitions()  # loads in the search itself
    _vector(s, "cat", "big")
    assert engine.embedder is not None
    query = np.frombuffer(engine.query_blob("parrot"), dtype="<f4")
    with s._db.read() as old:
        sp_old = engine.space(old, "l0")  # the snapshot starts here
        assert sp_old is not None
        s.capture_turn("big", "s9", "Our parrot Kiwi whistles the national anthem", "ok")
        s.reindex()
        _vector(s, "parrot", "big")  # the copy now holds the parrot
        assert engine.hot.search(old, sp_old, "big", query, 5) is None  # vec0 answers
    with s._db.read() as now:
        sp_now = engine.space(now, "l0")
        assert sp_now is not None
        got = engine.hot.search(now, sp_now, "big", query, 5)
        assert got is not None and len(got) == 5


def test_the_loader_thread_runs_after_the_search_and_stops_with_the_store(
    two_users: Store,
) -> None:
    s = two_users
    hot = s._search_engine.hot
    assert hot.background is not None  # the engine's own: loads in a thread
    on_vec0 = _vector(s, "cat kitten", "big")  # cold: vec0 answers, a load is queued
    hot.wait()
    assert ("big" in [u for _, u in hot.cached_users()]) and _vector(s, "cat kitten", "big")
    assert [t for t, _ in _vector(s, "cat kitten", "big")] == [t for t, _ in on_vec0]
    _vector(s, "cat", "small")  # queued again, then the store closes at once
    s.close()
    assert not [t for t in threading.enumerate() if t.name == "memstore-hot-vectors"]


# SQLite only: compares with sqlite-vec's vec0 bytes.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_stored_vectors_from_a_copy_are_vec0s_bytes(two_users: Store) -> None:
    """Recall's gate reads its candidates' vectors from the copy its search
    used: the very rows vec0 returns, only for a copy as of the caller's
    snapshot, never a deleted slot's."""
    from memstore.recall.rank import _stored_vectors

    s = two_users
    engine = s._search_engine
    engine.hot = HotPartitions()  # loads in the search itself
    _vector(s, "cat", "big")
    with s._db.read() as conn:
        sp = engine.space(conn, "l0")
        assert sp is not None
        ids = [
            int(r[0])
            for r in conn.exec_driver_sql(
                "SELECT id FROM l0_messages WHERE user_id = 'big' ORDER BY id"
            )
        ]
        want = [*ids[::2], ids[0] + 10_000]  # one id nobody has
        got = engine.hot.stored(sp, "big", want)
        ref = _stored_vectors(conn, sp, want)
        assert set(got) == set(ref) == set(ids[::2])
        for i in got:
            assert got[i].dtype == ref[i].dtype and got[i].tobytes() == ref[i].tobytes()
        assert engine.hot.stored(sp, "small", ids) == {}  # another user's copy: none
    # A copy not as of the caller's snapshot gives nothing (the caller reads vec0).
    with s._db.read() as old:
        sp_old = engine.space(old, "l0")
        assert sp_old is not None
        s.capture_turn("big", "s9", "Our parrot Kiwi whistles the national anthem", "ok")
        s.reindex()
        _vector(s, "parrot", "big")
        assert engine.hot.stored(sp_old, "big", ids) == {}
    # A deleted row's slot stays in vec0's chunk, dead: never returned.
    with s._db.write() as conn:
        conn.exec_driver_sql(f'DELETE FROM "{sp.table_name}" WHERE rowid = {ids[0]}')
    with s._db.read() as conn:
        sp_now = engine.space(conn, "l0")
        assert sp_now is not None
        reloaded = _load(conn, sp_now, "big")
    assert reloaded.dead is not None and reloaded.dead.any()
    assert set(reloaded.stored(np.asarray(ids[:2], dtype=np.int64))) == {ids[1]}
