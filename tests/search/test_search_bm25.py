"""Keyword search ranks with the user's own BM25 statistics.

The oracle is FTS5 itself: on a store with one user, the per-user ranking
must give ``bm25()``'s ids and scores bit for bit; with several users, a
user's list must not move when someone else's messages arrive.
"""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import text

from memstore.config import Settings
from memstore.db import migrate
from memstore.derive.messages.projection import user_fts_range
from memstore.search import bm25
from memstore.search import phrases as phrases_mod
from memstore.store import Store, default_projections
from memstore.text import build_match, document_columns, stem_text
from memstore.text.terms import column_tokens, document_stats, fts_tokens, parse_repeats

pytestmark = pytest.mark.both_backends

_TEXTS = (
    "I'm allergic to peanuts, peanut butter makes me sick; peanuts everywhere!",
    "The allergy clinic in Lisbon called about my allergies.",
    "Café au lait at the Café Tortoni, then crème brûlée — très bien.",
    "Nous avons mangé des crêpes à Zürich et à São Paulo.",
    "我每天早上喝咖啡，咖啡让我清醒。",
    "東京で寿司を食べました。寿司が大好き！",
    "오늘 커피를 마셨어요. 커피 맛있어요.",
    "Run, running, runner: she runs every morning and ran the marathon twice.",
    "ok",
    "Thanks!",
    "The the the the: a message of function words is a message too.",
    "Ελληνικά κείμενα και ΟΔΟΣ οδός στην Αθήνα.",
    "Привет, как дела? Москва, Москва!",
    "Prices: 42 apples, 3.14 pies, 1,000,000 dollars and 42 again.",
    "snake_case and kebab-case and CamelCase words, e-mail and e‑mail.",
    "The marathon training plan: marathon on Sunday, long runs on Friday.",
    " ".join(f"word{i % 50} filler" for i in range(200)),  # > 127 tokens in a column
)
_QUERIES = (
    "peanut allergy",
    "allergic reactions",
    "cafe creme brulee",
    "Café",
    "zurich sao paulo",
    "咖啡",
    "咖",
    "寿司",
    "커피",
    "running marathon",
    "the",
    "what is it",
    "οδος Αθήνα",
    "Москва",
    "42 apples",
    "snake case kebab",
    'peanuts" OR "x',
    "NEAR(peanut marathon) AND col:text ^run*",
    "word7 filler",
    "thanks",
)


def _fill(store: Store, user: str, texts: tuple[str, ...], session: str = "s0") -> None:
    store.capture(user, session, [{"role": "user", "content": t} for t in texts])


def _fts5_bm25(store: Store, query: str, user: str, k: int) -> list[tuple[int, float]]:
    match = build_match(query)
    with store._db.read() as conn:
        span = user_fts_range(conn, user)
        if match is None or span is None:
            return []
        rows = conn.exec_driver_sql(
            "SELECT rowid - ?, bm25(l0_fts, 1.0, 1.0, 1.0) AS s FROM l0_fts "
            "WHERE l0_fts MATCH ? AND rowid BETWEEN ? AND ? ORDER BY s, rowid LIMIT ?",
            (span[0], match, span[0], span[1], k),
        ).all()
    return [(int(i), float(s)) for i, s in rows]


def _per_user(
    store: Store, query: str, user: str, k: int, session: str | None = None, shortcut: bool = False
) -> list[tuple[int, float]]:
    with store._db.read() as conn:
        return bm25.keyword_messages(
            conn, query, user, k, session_id=session, sole_user_shortcut=shortcut
        )


# SQLite only: checked against FTS5's own bm25() and its stored statistics.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_one_user_store_ranks_exactly_as_fts5_bm25(store: Store) -> None:
    for round_ in range(3):
        _fill(store, "solo", _TEXTS, f"s{round_}")
    compared = 0
    for q in _QUERIES:
        got = _per_user(store, q, "solo", 40)
        want = _fts5_bm25(store, q, "solo", 40)
        assert got == want, q
        # The store's only user takes bm25() itself: the same list.
        assert _per_user(store, q, "solo", 40, shortcut=True) == want, q
        compared += bool(want)
    assert compared >= len(_QUERIES) - 2


# SQLite only: checked against FTS5's own bm25() and its stored statistics.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_query_of_more_than_32_phrases_ranks_as_fts5(store: Store) -> None:
    # Phrases are tagged with bits in two 32-bit words (memstore.search.bm25):
    # words and their roots past the 32nd must count like the first ones.
    for round_ in range(2):
        _fill(store, "solo", _TEXTS, f"s{round_}")
    words = (
        "peanuts allergic clinic lisbon called café tortoni crème brûlée crêpes zürich "
        "paulo running runner marathon twice training sunday friday long apples pies "
        "dollars snake kebab camelcase mail prices filler word7 word9 morning every "
        "again mangé avons"
    )
    query = words + " 咖啡 寿司"
    phrases = bm25.query_phrases(query)
    assert len(phrases) > 40
    got = _per_user(store, query, "solo", 40)
    assert got == _fts5_bm25(store, query, "solo", 40)
    assert len(got) >= 10
    # The last words alone (bits of the second word) still find their messages.
    tail = _per_user(store, "mangé avons", "solo", 40)
    assert tail and tail == _fts5_bm25(store, "mangé avons", "solo", 40)


# SQLite only: checked against FTS5's own bm25() and its stored statistics.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_engine_returns_the_same_order(store: Store) -> None:
    _fill(store, "solo", _TEXTS)
    for q in ("peanut allergy", "咖啡", "running marathon"):
        hits = store.search_conversations("solo", q, limit=5, strategy="keyword")
        want = [i for i, _ in _fts5_bm25(store, q, "solo", 40)]
        assert [h.id for h in hits] == want[: len(hits)] and hits, q
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_exact_forms_rank_above_roots(store: Store) -> None:
    _fill(store, "u", ("She is allergic to cats.", "Her allergy to cats is bad."))
    hits = store.search_conversations("u", "allergic", strategy="keyword")
    assert [h.text for h in hits] == ["She is allergic to cats.", "Her allergy to cats is bad."]


# SQLite only: checked against FTS5's own bm25() and its stored statistics.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_another_users_messages_do_not_change_my_ranking(store: Store) -> None:
    _fill(store, "alice", _TEXTS)
    before = {q: _per_user(store, q, "alice", 20) for q in _QUERIES}
    alone = {q: _per_user(store, q, "alice", 20, shortcut=True) for q in _QUERIES}
    # Bob talks about the same things, far more often, and about other things.
    for i in range(6):
        _fill(store, "bob", _TEXTS[::-1], f"b{i}")
        _fill(store, "bob", ("peanut peanut peanut", "marathon", "咖啡咖啡"), f"c{i}")
    after = {q: _per_user(store, q, "alice", 20) for q in _QUERIES}
    assert after == before == alone
    assert {q: _per_user(store, q, "alice", 20, shortcut=True) for q in _QUERIES} == before
    assert any(before.values())
    # Under bm25() over the shared table Bob's words did move Alice's scores.
    assert any(_fts5_bm25(store, q, "alice", 20) != before[q] for q in _QUERIES if before[q])


# SQLite only: checked against FTS5's own bm25() and its stored statistics.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_session_filter_keeps_the_users_statistics(store: Store) -> None:
    _fill(store, "u", _TEXTS[:8], "a")
    _fill(store, "u", _TEXTS[8:], "b")
    _fill(store, "u", ("peanut allergy again", "a marathon in March"), "c")
    with store._db.read() as conn:
        session_of = dict(conn.execute(text("SELECT id, session_id FROM l0_messages")).all())
    for q in ("peanut allergy", "marathon", "again March"):
        everything = _per_user(store, q, "u", 40)
        only_c = _per_user(store, q, "u", 40, session="c")
        assert only_c == [r for r in everything if session_of[r[0]] == "c"], q
        assert only_c
        hits = store.search_conversations("u", q, strategy="keyword", session_id="c")
        assert {h.session_id for h in hits} == {"c"}


def test_user_text_is_never_query_syntax(store: Store) -> None:
    _fill(store, "u", _TEXTS)
    for q in ('"', "AND", "NEAR(", "*", "^", "col:x", '") OR ("', "peanut*", "{text}: x"):
        store.search_conversations("u", q, strategy="keyword")  # never raises
    hits = store.search_conversations("u", "peanut*", strategy="keyword")
    assert hits and all("peanut" in h.text.lower() for h in hits)


# SQLite only: checked against FTS5's own bm25() and its stored statistics.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_nobody_and_empty_queries(store: Store) -> None:
    _fill(store, "u", _TEXTS)
    assert _per_user(store, "peanut", "nobody", 10) == []
    assert _per_user(store, "", "u", 10) == []
    assert _per_user(store, "?!", "u", 10) == []


def test_tokens_are_fts5_unicode61_tokens() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='unicode61 remove_diacritics 2')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    samples = (
        *_TEXTS,
        "e\u0301cole de\u0301ja\u0300 a\u0301b",
        "ǅemal ß straße İstanbul ſ ẞ ς Σ µ K Å ı ø đ ł æ œ ŉ ǰ ΐ ὒ",
    )
    for i, sample in enumerate(samples, start=1):
        db.execute("INSERT INTO t(rowid, x) VALUES (?, ?)", (i, sample))
    for i, sample in enumerate(samples, start=1):
        got = [r[0] for r in db.execute("SELECT term FROM v WHERE doc = ? ORDER BY offset", (i,))]
        assert fts_tokens(sample) == got, sample


# SQLite only: checked against FTS5's own bm25() and its stored statistics.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_stored_statistics_are_fts5s(store: Store) -> None:
    _fill(store, "u", _TEXTS)
    _fill(store, "w", _TEXTS[:3])
    with store._db.read() as conn:
        raw = conn.connection.driver_connection
        for user in ("u", "w"):
            lo, hi = user_fts_range(conn, user) or (0, -1)
            sizes = [
                bm25._doc_length(r[0])
                for r in raw.execute(
                    "SELECT sz FROM l0_fts_docsize WHERE id BETWEEN ? AND ?", (lo, hi)
                )
            ]
            docs, tokens = raw.execute(
                "SELECT docs, tokens FROM l0_user_slots WHERE user_id = ?", (user,)
            ).fetchone()
            assert (docs, tokens) == (len(sizes), sum(sizes)) and tokens > 0
    length, repeats = document_stats("peanut peanut the the", "", "peanut peanut the the")
    assert length == 8 and parse_repeats(repeats) == {(0, "peanut"): 2, (2, "peanut"): 2}


# SQLite only: checked against FTS5's own bm25() and its stored statistics.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_rebuild_and_migration_give_the_same_statistics(target: str, settings: Settings) -> None:
    def snapshot(s: Store) -> tuple[object, ...]:
        with s._db.read() as conn:
            return (
                conn.execute(text("SELECT user_id, slot, docs, tokens FROM l0_user_slots")).all(),
                conn.execute(text("SELECT key, repeats FROM l0_term_repeats ORDER BY key")).all(),
            )

    with Store.open(target, settings=settings) as s:
        _fill(s, "u", _TEXTS)
        _fill(s, "w", _TEXTS[::-1])
        before = snapshot(s)
        ranking = {q: _per_user(s, q, "w", 10) for q in _QUERIES}
        assert before[1]  # some messages repeat a term
        s.rebuild()
        assert snapshot(s) == before
        owners = migrate.projection_tables(default_projections())
        migrate.downgrade(s._db, "0012_search_storage", owners=owners)
    with Store.open(target, settings=settings) as s:
        assert snapshot(s) == before
        assert {q: _per_user(s, q, "w", 10) for q in _QUERIES} == ranking


@pytest.mark.parametrize("size", [b"\x05\x00\x07", b"\x81\x00\x02\x03"])
def test_docsize_blobs_decode(size: bytes) -> None:
    assert bm25._doc_length(size) == {b"\x05\x00\x07": 12, b"\x81\x00\x02\x03": 133}[size]


def _window_count(phrase: phrases_mod.Phrase, tokens: list[str]) -> int:
    """Occurrences of ``phrase`` by a plain sliding window (the reference)."""
    n, want = len(phrase.tokens), phrase.tokens
    return sum(
        1
        for i in range(len(tokens) - n + 1)
        if tuple(tokens[i : i + n - 1]) == want[:-1]
        and (
            tokens[i + n - 1] == want[-1]
            or (phrase.prefix and tokens[i + n - 1].startswith(want[-1]))
        )
    )


def test_counts_from_text_equal_a_whole_message_count() -> None:
    # Counted phrases (function words, prefixes, several CJK tokens) are
    # counted in the columns they search only; every phrase, any subset.
    for text_ in _TEXTS:
        latin, cjk = document_columns(text_)
        columns = column_tokens(latin, cjk, stem_text(latin))
        for query in (*_QUERIES, "咖啡让", "pea*", "run* the"):
            phrases = bm25.query_phrases(query)
            which = list(range(len(phrases)))
            want = [_window_count(p, columns[p.column]) for p in phrases]
            assert phrases_mod.text_counts(phrases, text_, which) == want, (text_, query)
            assert phrases_mod.text_counts(phrases, text_, which[1::2]) == want[1::2]
