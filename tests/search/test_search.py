from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from sqlalchemy import event

from memstore import Settings
from memstore.search import clamp_limit
from memstore.store import Store
from memstore.vectors import spaces
from tests.backends import Targets

pytestmark = pytest.mark.both_backends

STRATEGIES = ("keyword", "vector", "hybrid")


def _fill(store: Store) -> Store:
    store.capture_turn("alice", "s1", "My cat is called Mochi and she loves tuna", "Cute!")
    store.capture_turn(
        "alice", "s2", "I am planning a hiking trip to the Alps in June", "Sounds fun"
    )
    store.capture_turn("alice", "s2", "我每天早上都喝咖啡", "好的，记住了")
    store.capture_turn("bob", "s1", "My cat is called Tiger and he hates tuna", "Ok")
    store.capture_turn("bob", "s1", "我不喜欢咖啡", "明白")
    store.reindex()
    return store


@pytest.fixture
def filled(store: Store) -> Store:
    return _fill(store)


@pytest.fixture(scope="module")
def filled_once(module_target: Targets) -> Iterator[Store]:
    """The same content, built once per module, for the tests that only search
    (over a hundred hostile queries): a store per query costs its migrations."""
    settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(module_target("m.db"), settings=settings) as s:
        yield _fill(s)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_strategy_finds_the_right_message(filled: Store, strategy: str) -> None:
    hits = filled.search_conversations("alice", "what is the cat called", strategy=strategy)
    assert hits and "Mochi" in hits[0].text
    assert all(h.user_id == "alice" for h in hits)
    h = hits[0]
    assert h.session_id == "s1" and h.role == "user" and h.ref.startswith("h:") and h.score > 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_character_chinese_query(filled: Store, strategy: str) -> None:
    hits = filled.search_conversations("alice", "咖啡", strategy=strategy)
    assert hits and hits[0].text == "我每天早上都喝咖啡"


def test_session_filter(filled: Store) -> None:
    for strategy in STRATEGIES:
        hits = filled.search_conversations("alice", "cat", session_id="s2", strategy=strategy)
        assert all(h.session_id == "s2" for h in hits)


def test_limit_is_clamped() -> None:
    assert clamp_limit("abc") == 5 and clamp_limit(None) == 5
    assert clamp_limit(0) == 1 and clamp_limit(-3) == 1 and clamp_limit(99) == 20
    assert clamp_limit("7") == 7 and clamp_limit(3.9) == 3


def test_limit_applies(filled: Store) -> None:
    assert len(filled.search_conversations("alice", "cat tuna hiking 咖啡", limit=2)) == 2
    assert len(filled.search_conversations("alice", "cat", limit="lots")) <= 5


HOSTILE = [
    "",
    "   ",
    '"',
    '"unbalanced',
    "AND(",
    "cat AND",
    "OR OR OR",
    "NEAR(cat tuna, 2)",
    "*",
    "cat*",
    "text: cat",
    "{text}: cat",
    "((((",
    ")",
    "^cat",
    "-cat",
    "🐱🐱",
    "\x00",
    "x" * 10000,
    "'; DROP TABLE events; --",
]


@pytest.mark.parametrize("query", HOSTILE)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_user_text_is_never_fts_syntax(filled_once: Store, query: str, strategy: str) -> None:
    hits = filled_once.search_conversations("alice", query, strategy=strategy)
    assert isinstance(hits, list)
    assert all(h.user_id == "alice" for h in hits)
    assert filled_once.read_events()  # nothing dropped


@hsettings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(q=st.text(max_size=60))
def test_any_text_query_is_safe(filled_once: Store, q: str) -> None:
    for strategy in STRATEGIES:
        filled_once.search_conversations("alice", q, strategy=strategy)


def _isolation(target: str, settings: Settings, captures: int, users_n: int) -> None:
    rng = random.Random(7)
    words = [
        "tea",
        "coffee",
        "cat",
        "dog",
        "hiking",
        "Alps",
        "Paris",
        "tuna",
        "piano",
        "guitar",
        "咖啡",
        "茶",
        "猫",
        "旅行",
    ]
    users = [f"user{i}" for i in range(users_n)]
    with Store.open(target, settings=settings) as s:
        owned: dict[str, set[str]] = {u: set() for u in users}
        for n in range(captures):
            u = rng.choice(users)
            text = " ".join(rng.choice(words) for _ in range(5)) + f" #{n}"
            res = s.capture(u, f"s{n % 3}", [{"role": "user", "content": text}])
            owned[u] |= set(res.stored)
        s.reindex()
        for u in users:
            for q in [*words, "tea coffee cat", "猫 咖啡", ""]:
                for strategy in STRATEGIES:
                    for h in s.search_conversations(u, q, strategy=strategy, limit=20):
                        assert h.user_id == u and h.ref in owned[u], (u, q, strategy)


def test_isolation_is_absolute_across_generated_users(target: str, settings: Settings) -> None:
    # Isolation does not need size: three users sharing every word.
    _isolation(target, settings, captures=60, users_n=3)


@pytest.mark.slow
def test_isolation_is_absolute_across_many_generated_users(target: str, settings: Settings) -> None:
    _isolation(target, settings, captures=240, users_n=6)


def test_model_change_reembeds_in_background_and_meanwhile_keyword_only(
    target: str, settings: Settings
) -> None:
    with Store.open(target, settings=settings) as s:
        s.capture_turn("u", "s", "My cat is called Mochi", "ok")
        s.reindex()
        assert s._search_engine.vector_ready("l0")
    other = settings.replace(embedder="hashing", embed_dimensions=128)
    with Store.open(target, settings=other) as s:
        assert s._embedder is not None and s._embedder.model_id == "hashing-v1-128"
        # new model, nothing embedded yet: vector and hybrid fall back to keyword
        assert not s._search_engine.vector_ready("l0")
        hits = s.search_conversations("u", "Mochi", strategy="vector")
        assert hits and hits[0].vector_rank is None and hits[0].keyword_rank == 1
        assert s.embedding_status()["l0"]["pending"] == 2
        s.reindex()
        hits = s.search_conversations("u", "cat Mochi", strategy="vector")
        assert hits and hits[0].vector_rank == 1
    # and back: the old space is still complete, nothing to embed
    with Store.open(target, settings=settings) as s:
        assert s._search_engine.vector_ready("l0")
        assert s.embedding_status()["l0"]["pending"] == 0


def test_vector_search_survives_rebuild_without_embedding(filled: Store) -> None:
    before = filled.search_conversations("alice", "cat", strategy="vector")
    assert before and all(h.vector_rank for h in before)
    calls: list[int] = []
    assert filled._embedder is not None
    original = filled._embedder.embed_documents

    def counting(texts):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        return original(texts)

    filled._embedder.embed_documents = counting  # type: ignore[method-assign]
    filled.rebuild()
    # vec0 is the stored copy and replay gives every message its id again:
    # vector search answers at once, with the same vectors, before any reindex.
    assert filled._search_engine.vector_ready("l0")
    after = filled.search_conversations("alice", "cat", strategy="vector")
    assert [(h.text, h.similarity) for h in after] == [(h.text, h.similarity) for h in before]
    filled.reindex()
    assert calls == []
    with filled._db.read() as conn:
        # The cache no longer holds a second copy of each vector.
        assert conn.exec_driver_sql("select count(*) from embedding_cache").scalar_one() == 0


def test_wrong_dimension_vectors_are_rejected(filled: Store) -> None:
    import numpy as np

    from memstore.embeddings import check_vectors
    from memstore.errors import EmbeddingError

    with pytest.raises(EmbeddingError):
        check_vectors(np.ones((1, 10), dtype=np.float32), 384)
    with pytest.raises(EmbeddingError):
        check_vectors(np.full((1, 384), np.nan, dtype=np.float32), 384)


def test_vector_search_falls_back_to_keyword_while_a_reset_space_refills(store: Store) -> None:
    store.capture_turn("u", "s", "the zebra crossing", "ok")
    store.reindex()
    # A rebuild keeps vectors now (vec0 is their stored copy); a reset space
    # (what a new embedding model starts as) is still empty until refilled.
    with store._db.write() as conn:
        spaces.reset_kind(conn, "l0")
    hits = store.search_conversations("u", "zebra", strategy="vector")
    assert hits and hits[0].keyword_rank == 1 and hits[0].vector_rank is None
    store.reindex()
    hits = store.search_conversations("u", "zebra", strategy="vector")
    assert hits and hits[0].vector_rank == 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_conversation_search_is_one_read_transaction(filled: Store, strategy: str) -> None:
    """The forgotten sources it leaves out and the hits come from one snapshot
    (and one connection checkout, a share of a keyword search's CPU)."""
    filled.search_conversations("alice", "cat tuna", strategy=strategy)  # warm
    begun: list[object] = []
    caller = threading.get_ident()

    def on_begin(conn: object) -> None:
        # The search's own: a background load (a user's in-memory postings or
        # vectors) may begin one on its thread meanwhile.
        if threading.get_ident() == caller:
            begun.append(conn)

    engine = filled.internals.db.engine
    event.listen(engine, "begin", on_begin)
    try:
        hits = filled.search_conversations("alice", "cat tuna", strategy=strategy)
    finally:
        event.remove(engine, "begin", on_begin)
    assert hits
    assert len(begun) == 1
