"""A large user's keyword search from in-memory postings (memstore.search.postings).

The oracle is the SQL path of memstore.search.bm25 (itself checked against
FTS5's ``bm25()`` in test_search_bm25): the in-memory copy must return the
same ids and the same scores, bit for bit, and must follow the store through
appends, rebuilds and erasures. ``min_docs`` is lowered so small stores
count as large.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, text

from memstore.search import bm25, postings
from memstore.search.postings import HotPostings
from memstore.store import Store
from tests.search.test_search_bm25 import _QUERIES, _TEXTS, _fill, _fts5_bm25


@pytest.fixture
def hot(store: Store) -> Iterator[HotPostings]:
    cache = HotPostings(min_docs=1)
    store._search_engine.hot_postings = cache
    yield cache


def _both(
    store: Store, hot: HotPostings, query: str, user: str, k: int = 40, session: str | None = None
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    with store._db.read() as conn:
        fast = bm25.keyword_messages(conn, query, user, k, session_id=session, hot=hot)
        slow = bm25.keyword_messages(
            conn, query, user, k, session_id=session, sole_user_shortcut=False
        )
    return fast, slow


def _used(conn: Connection, hot: HotPostings, user: str) -> bool:
    raw = conn.connection.driver_connection
    stats = raw.execute(
        "SELECT slot, docs, tokens FROM l0_user_slots WHERE user_id = ?", (user,)
    ).fetchone()
    return hot.current(raw, user, *stats) is not None


def test_the_copy_ranks_as_the_sql_path_and_fts5(store: Store, hot: HotPostings) -> None:
    for round_ in range(3):
        _fill(store, "solo", _TEXTS, f"s{round_}")
    compared = 0
    for q in _QUERIES:
        fast, slow = _both(store, hot, q, "solo")
        assert fast == slow == _fts5_bm25(store, q, "solo", 40), q
        compared += bool(fast)
        for k in (1, 3):  # ties at the edge of a short list go by id
            assert _both(store, hot, q, "solo", k)[0] == slow[:k], (q, k)
    assert compared >= len(_QUERIES) - 2
    assert hot.cached_users() == ["solo"]


def test_another_users_words_do_not_move_the_copy(store: Store, hot: HotPostings) -> None:
    _fill(store, "alice", _TEXTS)
    for i in range(3):
        _fill(store, "bob", _TEXTS[::-1], f"b{i}")
        _fill(store, "bob", ("peanut peanut peanut", "marathon", "咖啡咖啡"), f"c{i}")
    for q in _QUERIES:
        for user in ("alice", "bob"):
            fast, slow = _both(store, hot, q, user)
            assert fast == slow, (q, user)
    assert sorted(hot.cached_users()) == ["alice", "bob"]


def test_a_session_filter_keeps_the_users_statistics(store: Store, hot: HotPostings) -> None:
    _fill(store, "u", _TEXTS[:8], "a")
    _fill(store, "u", _TEXTS[8:], "b")
    _fill(store, "u", ("peanut allergy again", "a marathon in March"), "c")
    for q in ("peanut allergy", "marathon", "again March", "咖啡"):
        for session in ("a", "c", "nope"):
            fast, slow = _both(store, hot, q, "u", session=session)
            assert fast == slow, (q, session)
    assert _both(store, hot, "marathon", "u", session="c")[0]


def test_appended_messages_extend_the_copy(store: Store, hot: HotPostings) -> None:
    _fill(store, "u", _TEXTS)
    assert _both(store, hot, "peanut", "u")[0]
    vocab = hot._copies["u"].vocab
    for i in range(12):  # past the segment limit: the small ones are merged
        _fill(store, "u", (f"peanut number {i}", "marathon 咖啡 again", "the the"), f"n{i}")
        for q in ("peanut", "marathon again", "咖", "number 7", "the"):
            fast, slow = _both(store, hot, q, "u")
            assert fast == slow, (i, q)
    copy = hot._copies["u"]
    assert copy.vocab is vocab  # extended in place of a reload
    assert copy.docs == len(_TEXTS) + 36
    assert len(copy.segments) <= 9


def test_rebuild_and_erasure_reload_the_copy(store: Store, hot: HotPostings) -> None:
    # Bob's messages come between Alice's, so erasing him renumbers Alice's
    # later messages while her slot (the order of first messages) stays.
    _fill(store, "alice", _TEXTS[:5], "a")
    _fill(store, "bob", ("peanut butter", "marathon day"), "b")
    _fill(store, "alice", _TEXTS[5:], "a2")
    before = {q: _both(store, hot, q, "alice") for q in _QUERIES}
    slot = hot._copies["alice"].slot
    store.rebuild()
    for q in _QUERIES:
        fast, slow = _both(store, hot, q, "alice")
        assert fast == slow == before[q][1], q
    store.forget_user("bob")
    with store._db.read() as conn:
        last = conn.execute(
            text("SELECT max(id) FROM l0_messages WHERE user_id = 'alice'")
        ).scalar_one()
    assert last == len(_TEXTS)  # renumbered
    for q in _QUERIES:
        fast, slow = _both(store, hot, q, "alice")
        assert fast == slow, q
        assert [s for _, s in fast] == [s for _, s in before[q][1]], q
    assert _both(store, hot, "peanut", "bob") == ([], [])
    copy = hot._copies["alice"]
    assert (copy.slot, copy.last[0]) == (slot, len(_TEXTS))  # reloaded, same slot


def test_an_erased_users_copy_leaves_memory(store: Store, hot: HotPostings) -> None:
    _fill(store, "alice", _TEXTS[:4], "a")
    _fill(store, "bob", _TEXTS, "b")
    assert _both(store, hot, "peanut", "bob")[0]
    assert sorted(hot.cached_users()) == ["bob"]
    store.forget_user("bob")
    _both(store, hot, "peanut", "alice")  # anyone's next search
    assert hot.cached_users() == ["alice"]


def test_small_users_and_unknown_users_stay_on_sql(store: Store) -> None:
    _fill(store, "u", _TEXTS)
    cache = HotPostings(min_docs=len(_TEXTS) + 1)
    with store._db.read() as conn:
        assert not _used(conn, cache, "u")
        assert bm25.keyword_messages(conn, "peanut", "nobody", 5, hot=cache) == []
    assert cache.cached_users() == []
    _fill(store, "u", ("one more",), "s2")
    with store._db.read() as conn:
        assert _used(conn, cache, "u")


def test_a_copy_that_disagrees_with_the_store_is_not_used(store: Store) -> None:
    _fill(store, "u", _TEXTS)
    cache = HotPostings(min_docs=1)
    with store._db.write() as conn:
        # A token total the copy cannot reproduce (as if a tokenizer differed).
        conn.execute(text("UPDATE l0_user_slots SET tokens = tokens + 1 WHERE user_id = 'u'"))
    with store._db.read() as conn:
        assert not _used(conn, cache, "u")
    assert cache.cached_users() == []


def test_the_engine_uses_the_copy(store: Store, hot: HotPostings) -> None:
    _fill(store, "solo", _TEXTS)
    for q in ("peanut allergy", "咖啡", "running marathon"):
        hits = store.search_conversations("solo", q, limit=5, strategy="keyword")
        want = [i for i, _ in _fts5_bm25(store, q, "solo", 40)]
        assert [h.id for h in hits] == want[: len(hits)] and hits, q
    assert hot.cached_users() == ["solo"]


def test_loads_run_in_the_background_while_sql_answers(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(store, "solo", _TEXTS)
    cache = HotPostings(min_docs=1, background=store._db.read)
    store._search_engine.hot_postings = cache
    want = [i for i, _ in _fts5_bm25(store, "peanut allergy", "solo", 5)]

    def ids() -> list[int]:
        hits = store.search_conversations("solo", "peanut allergy", strategy="keyword")
        return [h.id for h in hits]

    assert ids() == want  # answered while the copy loads (or after, if it was quick)
    cache.wait()
    assert cache.cached_users() == ["solo"]
    assert ids() == want
    # Many new messages at once are loaded again in the background too.
    monkeypatch.setattr(postings, "_MAX_SYNC_DELTA", 2)
    _fill(store, "solo", ("peanut allergy today", "more peanut", "allergy season"), "s9")
    with store._db.read() as conn:
        assert not _used(conn, cache, "solo")  # SQL while it reloads
    cache.wait()
    assert cache._copies["solo"].docs == len(_TEXTS) + 3
    fast, slow = _both(store, cache, "peanut allergy", "solo")
    assert fast == slow and len(fast) > len(want)


def test_searches_and_captures_in_threads(store: Store, hot: HotPostings) -> None:
    _fill(store, "u", _TEXTS)
    errors: list[BaseException] = []

    def search() -> None:
        try:
            for _ in range(25):
                for q in ("咖", "peanut", "marathon 寿司"):
                    fast, slow = _both(store, hot, q, "u")
                    assert fast == slow, q
        except BaseException as e:  # reported below, with the thread's failure
            errors.append(e)

    threads = [threading.Thread(target=search) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(10):
        _fill(store, "u", (f"咖{i}啡 new words{i}", f"peanut {i}"), f"t{i}")
    for t in threads:
        t.join()
    assert errors == []
    assert _both(store, hot, "咖", "u")[0] == _both(store, hot, "咖", "u")[1]


def test_least_recently_used_copies_leave_past_the_byte_budget(store: Store) -> None:
    _fill(store, "alice", _TEXTS, "a")
    _fill(store, "bob", _TEXTS, "b")
    cache = HotPostings(min_docs=1)
    store._search_engine.hot_postings = cache
    _both(store, cache, "peanut", "alice")
    one = cache._copies["alice"].nbytes
    cache.max_bytes = one + one // 2  # room for one copy, not two
    for _ in range(3):  # searching a cached user again keeps it
        _both(store, cache, "peanut", "alice")
    assert cache.cached_users() == ["alice"]
    _both(store, cache, "peanut", "bob")
    assert cache.cached_users() == ["bob"]


def test_many_cached_users_are_checked_for_erasure_together(store: Store) -> None:
    users = [f"u{i:03d}" for i in range(12)]
    for user in users:
        _fill(store, user, _TEXTS[:3], "s")
    cache = HotPostings(min_docs=1)
    store._search_engine.hot_postings = cache
    for user in users:
        _both(store, cache, "peanut", user)
    assert sorted(cache.cached_users()) == users
    store.forget_user("u003")
    store.forget_user("u007")
    _both(store, cache, "peanut", "u000")
    kept = cache.cached_users()
    # Erased users leave; an erasure may also renumber later users' slots,
    # whose copies then go too (reloaded on their next search).
    assert "u000" in kept and not {"u003", "u007"} & set(kept)
    with store._db.read() as conn:
        slots = dict(conn.execute(text("SELECT user_id, slot FROM l0_user_slots")).all())
    assert all(cache._copies[u].slot == slots[u] for u in kept)
    for user in users:
        if user not in ("u003", "u007"):
            fast, slow = _both(store, cache, "peanut", user)
            assert fast == slow and fast, user


def test_a_user_of_a_thousand_messages_is_ranked_from_a_copy_by_default() -> None:
    # Conversation-like text at 1k messages a user cost several times FTS5's
    # own bm25() from SQL (BENCHMARKS.md, "Keyword search per user").
    assert HotPostings().min_docs <= 1_000 <= postings.MIN_DOCS * 2


def test_one_background_load_at_a_time(store: Store) -> None:
    _fill(store, "alice", _TEXTS, "a")
    _fill(store, "bob", _TEXTS, "b")
    cache = HotPostings(min_docs=1, background=store._db.read)
    store._search_engine.hot_postings = cache
    gate = threading.Event()
    real_load = cache._load

    def slow_load(user_id: str) -> None:
        gate.wait(10)
        real_load(user_id)

    cache._load = slow_load  # type: ignore[method-assign]
    with store._db.read() as conn:
        assert not _used(conn, cache, "alice")  # starts alice's load
        assert not _used(conn, cache, "bob")  # SQL, and no second load
    assert list(cache._building) == ["alice"]
    gate.set()
    cache.wait()
    with store._db.read() as conn:
        assert not _used(conn, cache, "bob")  # now bob's load starts
    cache.wait()
    assert sorted(cache.cached_users()) == ["alice", "bob"]
    fast, slow = _both(store, cache, "peanut", "bob")
    assert fast == slow and fast
