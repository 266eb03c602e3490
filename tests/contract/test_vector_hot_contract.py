"""Every partition searched in memory (memstore.vectors.hot), memories (L1)
and small conversation partitions (L0) included, against vec0 / pgvector:
same ids and similarities, kept current through every kind of change."""

from __future__ import annotations

import pytest

from memstore import Settings
from memstore.search.hits import Hit
from memstore.store import Store
from memstore.vectors.hot import HotPartitions


@pytest.fixture(params=["int8", "float32"])
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """Both element types of SQLite vector spaces (PostgreSQL: float32 either way)."""
    return settings.replace(vector_element=request.param)


FACTS = [
    "Alice drinks green tea every morning",
    "Alice is allergic to peanuts",
    "Alice's cat is called Mochi and loves tuna",
    "Alice plans a hiking trip to the Alps in June",
    "Alice's sister lives in Lisbon and teaches piano",
    "Alice started baking sourdough bread",
    "Alice works night shifts at the hospital",
    "Alice prefers answers in short bullet points",
]


def _memories(store: Store) -> None:
    for i, fact in enumerate(FACTS):
        kind = "persona" if i % 2 else "episodic"
        store.write_memory("alice", "add", fact, type=kind, scene="home" if i % 3 else "work")
    store.write_memory("bob", "add", "Bob's dog Rex loves green tennis balls", type="persona")
    store.write_memory("bob", "add", "Bob drinks black coffee", type="persona")
    store.reindex()


def _found(hits: list[Hit]) -> list[tuple[str, float]]:
    return [(h.ref, round(h.similarity or 0.0, 5)) for h in hits]


def _same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> None:
    """Same similarities in the same order; rows at exactly equal distance
    come in vec0's chunk order there and by id here."""
    assert [s for _, s in a] == [s for _, s in b]
    assert sorted(a) == sorted(b)


def _both(store: Store, query: str, user: str = "alice", **kw: str) -> list[tuple[str, float]]:
    """Memory search in memory and on vec0 (pgvector); asserts they agree."""
    engine = store._search_engine
    hot = engine.hot
    # The first search after a change is vec0's while the copy loads.
    first = store.search_memories(user, query, strategy="vector", limit=10, **kw)
    hot.wait()
    in_memory = store.search_memories(user, query, strategy="vector", limit=10, **kw)
    _same(_found(first), _found(in_memory))
    engine.hot = HotPartitions(kinds=())
    try:
        stored = store.search_memories(user, query, strategy="vector", limit=10, **kw)
    finally:
        engine.hot = hot
    _same(_found(in_memory), _found(stored))
    assert all(h.user_id == user for h in in_memory)
    return _found(in_memory)


def _l1_cached(store: Store) -> list[str]:
    return sorted(u for name, u in store._search_engine.hot.cached_users() if name[:3] == "l1:")


def test_memories_are_searched_in_memory_like_vec0(store: Store) -> None:
    _memories(store)
    got = _both(store, "green tea in the morning")
    assert len(got) == len(FACTS)
    assert _l1_cached(store) == ["alice"]
    assert [m.text for m in store.search_memories("bob", "green tea", limit=1)] == [
        "Bob's dog Rex loves green tennis balls"
    ]
    _both(store, "dog", user="bob")
    assert _l1_cached(store) == ["alice", "bob"]


def test_type_and_scene_filters_match_vec0(store: Store) -> None:
    _memories(store)
    persona = _both(store, "cat tuna", type="persona")
    home = _both(store, "cat tuna", scene="home")
    both = _both(store, "cat tuna", type="persona", scene="home")
    assert 0 < len(both) < len(persona) < len(FACTS) and len(home) < len(FACTS)
    hits = store.search_memories("alice", "cat", strategy="vector", type="persona")
    assert hits and all(h.type == "persona" for h in hits)


def test_retired_replaced_and_new_memories_reach_the_copy(store: Store) -> None:
    _memories(store)
    first = _both(store, "peanut allergy")
    top = store.search_memories("alice", "peanut allergy", strategy="vector", limit=1)[0]
    assert top.text == "Alice is allergic to peanuts"
    store.forget_memory("alice", top.ref)
    after = _both(store, "peanut allergy")
    assert top.ref not in [ref for ref, _ in after] and len(after) == len(first) - 1
    # Replaced text: a new vector for the memory's row, or a new row.
    store.write_memory(
        "alice",
        "replace",
        "Alice now drinks matcha",
        old_content="Alice drinks green tea every morning",
    )
    store.write_memory("alice", "add", "Alice's parrot Kiwi whistles the anthem", type="persona")
    store.reindex()
    texts = [h.text for h in store.search_memories("alice", "parrot whistles", limit=3)]
    assert texts[0] == "Alice's parrot Kiwi whistles the anthem"
    got = _both(store, "matcha")
    matcha = store.search_memories("alice", "matcha", strategy="vector", limit=1)
    assert matcha[0].text == "Alice now drinks matcha" and len(got) == len(FACTS)


def test_rederive_and_erasure_keep_the_copies_right(store: Store) -> None:
    store.capture_turn("alice", "s1", "I am vegetarian and I don't eat pork", "noted")
    store.capture_turn("alice", "s1", "My cat is called Mochi", "cute")
    _memories(store)
    before = _both(store, "cat")
    store.rederive("alice")
    store.reindex()
    after = _both(store, "cat")
    assert after != before  # another generation's memories
    bob = _both(store, "dog", user="bob")
    store.forget_user("alice")
    assert store.search_memories("alice", "cat", strategy="vector") == []
    assert _both(store, "dog", user="bob") == bob
    assert _l1_cached(store) == ["bob"]


def test_small_conversation_partitions_are_searched_in_memory(store: Store) -> None:
    for i, fact in enumerate(FACTS):
        store.capture_turn("alice", f"s{i % 2}", fact, "ok")
    store.capture_turn("bob", "s1", "My dog Rex chews tennis balls", "ok")
    store.reindex()
    engine = store._search_engine

    def search(**kw: str) -> list[tuple[str, float]]:
        got = store.search_conversations("alice", "cat tuna", strategy="vector", **kw)
        return _found(got)

    search()
    engine.hot.wait()
    in_memory = search()
    assert ("l0", "alice") in {(n[:2], u) for n, u in engine.hot.cached_users()}
    hot = engine.hot
    engine.hot = HotPartitions(kinds=())
    try:
        assert search() == in_memory
        on_vec0 = search(session_id="s1")
    finally:
        engine.hot = hot
    # A session filter on a small copy goes to vec0: the same answer.
    assert search(session_id="s1") == on_vec0 and on_vec0
    # New messages reach the copy.
    store.capture_turn("alice", "s3", "Our parrot Kiwi whistles the national anthem", "ok")
    store.reindex()
    hits = store.search_conversations("alice", "parrot whistles anthem", strategy="vector")
    assert hits[0].text.startswith("Our parrot Kiwi")
    # Read into the copy inline (the search saw it there), not reloaded later.
    (key,) = [k for k in engine.hot.cached_users() if k[0][:3] == "l0:" and k[1] == "alice"]
    assert hits[0].id in engine.hot._parts[key].ids.tolist()


@pytest.mark.parametrize("cap", [1])
def test_the_byte_cap_keeps_the_latest_copy(store: Store, cap: int) -> None:
    _memories(store)
    store._search_engine.hot = HotPartitions(max_bytes=cap)
    _both(store, "tea")
    _both(store, "dog", user="bob")
    assert [u for _, u in store._search_engine.hot.cached_users()] == ["bob"]
