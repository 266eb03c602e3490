"""Messages whose keyword rows the background indexer has not written yet.

With a background indexer (SQLite), a capture stores its messages and leaves
their FTS5 rows, term repeats and BM25 totals to the indexer
(memstore.derive.messages.keywords). Keyword search must find such a message
the moment its capture returns, ranked as it will be once indexed: here every
search runs twice on the same store, with the messages waiting and after the
indexer wrote their rows, and must give the same ids with the same scores,
on each of the ranking's paths (several users, the only user, a large user's
in-memory postings, a user none of whose messages is indexed yet).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore import Settings
from memstore.bench.chattext import ChatText
from memstore.search import bm25
from memstore.search.postings import HotPostings
from memstore.store import Store
from tests.derive_support import waiting_messages

# Query terms of every kind the ranking handles: plain words, word roots,
# function words and prefixes (counted from the text), a hyphenated phrase
# of two tokens, CJK, a speaker's name given only as metadata, a term that
# repeats inside a message, and words only waiting messages hold.
QUERIES = [
    "pottery class",
    "what did we say about the dinner",
    "the",
    "pott*",
    "ice-cream sundae",
    "咖啡",
    "Caroline",
    "peanut peanut allergy",
    "zygote quokka",
    "trip",
]

_FIXED = [
    ("user", "I love ice-cream sundae, ice-cream every day", None),
    ("assistant", "Noted: peanut allergy, no peanut butter, peanut free", None),
    ("user", "我每天早上喝咖啡 and pottery on Fridays", None),
    ("user", "the pottery class was fun", "Caroline"),
    ("assistant", "ok", None),
]


def _turn(store: Store, user: str, session: str, chat: ChatText, i: int) -> None:
    said, reply = chat.turn()
    role, extra, name = _FIXED[i % len(_FIXED)]
    messages = [
        {"role": "user", "content": said},
        {"role": "assistant", "content": reply},
        {"role": role, "content": f"{extra} #{i}", **({"name": name} if name else {})},
    ]
    store.capture(user, session, messages)


@pytest.fixture
def store(tmp_path: Path, settings: Settings) -> Iterator[Store]:
    s = Store.open(tmp_path / "m.db", settings=settings)
    try:
        yield s
    finally:
        s.close()


def _searches(
    store: Store, users: list[str], hot: HotPostings | None, shortcut: bool = True
) -> dict[tuple[str, str, str | None], list[tuple[int, float]]]:
    out = {}
    with store._db.read() as conn:
        for user in users:
            for q in QUERIES:
                for session in (None, "s1"):
                    out[(user, q, session)] = bm25.keyword_messages(
                        conn,
                        q,
                        user,
                        8,
                        session_id=session,
                        hot=hot,
                        sole_user_shortcut=shortcut,
                    )
    return out


def _same(
    waiting: dict[tuple[str, str, str | None], list[tuple[int, float]]],
    indexed: dict[tuple[str, str, str | None], list[tuple[int, float]]],
) -> None:
    assert waiting.keys() == indexed.keys()
    for key, got in waiting.items():
        want = indexed[key]
        assert [i for i, _ in got] == [i for i, _ in want], key
        for (_, a), (_, b) in zip(got, want, strict=True):
            assert a == pytest.approx(b, rel=1e-9, abs=1e-12), key


def _fill(store: Store, users: list[str], indexed: int, waiting: int, seed: int = 3) -> None:
    """``indexed`` turns per user with keyword rows written at capture, then
    ``waiting`` more left to the indexer."""
    chat = ChatText(seed=seed)
    parts = store.internals
    parts.defer_keywords(False)
    for i in range(indexed):
        for u in users:
            _turn(store, u, f"s{i % 3}", chat, i)
    assert parts.defer_keywords(True)
    for i in range(indexed, indexed + waiting):
        for u in users:
            _turn(store, u, f"s{i % 3}", chat, i)


@pytest.mark.parametrize(
    ("users", "hot_docs", "indexed"),
    [
        (["alice", "bob", "carol"], None, 12),  # SQL ranking, per-user statistics
        (["alice"], None, 12),  # the only user: bm25() shortcut when none wait
        (["alice", "bob"], 20, 12),  # in-memory postings (36 messages >= 20)
        (["alice", "bob"], None, 0),  # nothing indexed yet: no slot, all waiting
    ],
    ids=["users", "sole-user", "postings", "none-indexed"],
)
def test_waiting_messages_rank_as_they_will_once_indexed(
    store: Store, users: list[str], hot_docs: int | None, indexed: int
) -> None:
    _fill(store, users, indexed, waiting=5)
    assert waiting_messages(store) == 15 * len(users)
    hot = None if hot_docs is None else HotPostings(min_docs=hot_docs)
    before = _searches(store, users, hot)
    if hot is not None:
        assert hot.cached_users(), "the copies answered"
    assert any(before.values())
    assert store.internals.index_keywords() == 15 * len(users)
    assert waiting_messages(store) == 0
    after = _searches(store, users, hot)
    _same(before, after)
    # And the ranking of indexed messages is still bm25()'s own.
    _same(after, _searches(store, users, None, shortcut=False))


def test_a_message_is_found_the_moment_its_capture_returns(store: Store) -> None:
    assert store.internals.defer_keywords(True)
    store.capture("alice", "s", [{"role": "user", "content": "my quokka is called Zed"}])
    assert waiting_messages(store) == 1
    hits = store.search_conversations("alice", "quokka", strategy="keyword")
    assert [h.text for h in hits] == ["my quokka is called Zed"]
    assert store.search_conversations("bob", "quokka", strategy="keyword") == []
    # Another user's waiting messages never count in this user's ranking.
    store.capture("bob", "s", [{"role": "user", "content": "quokka quokka quokka"}])
    again = store.search_conversations("alice", "quokka", strategy="keyword")
    assert [(h.text, h.score) for h in again] == [(h.text, h.score) for h in hits]
