"""Keyword search reads one user's FTS rows and the
FTS table keeps no copy of the text (finding 5).

The reference is FTS5's own ``bm25()`` over a scratch table holding only the
user's messages (its own content, rowid = message id): keyword search ranks
with the user's statistics (memstore.search.bm25), so ids and scores agree
exactly with what FTS5 computes for that user alone.
"""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import text

from memstore.config import Settings
from memstore.db import migrate
from memstore.derive.messages.projection import SLOT_SHIFT, user_fts_range
from memstore.search.engine import Ask
from memstore.store import Store, default_projections
from memstore.text import build_match, document_columns, stem_text

pytestmark = pytest.mark.both_backends

_TOPICS = (
    "pottery class in Lisbon with Anna",
    "the marathon training plan and new running shoes",
    "sourdough bread recipe from grandma",
    "a violin lesson on Friday, the teacher was strict",
    "咖啡 and green tea in Kyoto",
    "the tax forms are due, accountant called",
    "my puppy chewed the garden beds",
)
_QUERIES = (
    "pottery class",
    "what about the marathon plan?",
    "bread",
    "violin teacher Friday",
    "咖啡",
    "tax accountant",
    "puppy garden",
    "Anna Lisbon bread violin",
)
_USERS = ("alice", "bob", "carol")


def _fill(store: Store) -> None:
    for round_ in range(4):
        for u, user in enumerate(_USERS):
            msgs = [
                {"role": "user", "content": f"{_TOPICS[(u + i + round_) % len(_TOPICS)]} #{i}"}
                for i in range(5)
            ]
            # The same words for every user, so a leak would be visible.
            msgs.append({"role": "assistant", "content": "pottery class with Anna, noted"})
            store.capture(user, f"s{round_}", msgs)


def _reference(store: Store, query: str, user: str, k: int) -> list[tuple[int, float]]:
    """The keyword list FTS5's bm25() gives over a table of ``user``'s messages."""
    ref = sqlite3.connect(":memory:")
    ref.execute(
        "CREATE VIRTUAL TABLE f USING fts5(text, cjk, stem, "
        "tokenize='unicode61 remove_diacritics 2')"
    )
    ref.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, user_id TEXT)")
    with store._db.read() as conn:
        rows = conn.execute(
            text("SELECT id, user_id, text FROM l0_messages WHERE user_id = :u"), {"u": user}
        ).all()
    for rid, uid, body in rows:
        latin, cjk = document_columns(body)
        ref.execute(
            "INSERT INTO f(rowid, text, cjk, stem) VALUES (?, ?, ?, ?)",
            (rid, latin, cjk, stem_text(latin)),
        )
        ref.execute("INSERT INTO m VALUES (?, ?)", (rid, uid))
    match = build_match(query)
    assert match is not None
    out = ref.execute(
        "SELECT m.id, bm25(f, 1.0, 1.0, 1.0) AS s FROM f JOIN m ON m.id = f.rowid "
        "WHERE f MATCH ? AND m.user_id = ? ORDER BY s, m.id LIMIT ?",
        (match, user, k),
    ).fetchall()
    ref.close()
    return [(int(i), float(s)) for i, s in out]


def _keyword(store: Store, query: str, user: str, k: int) -> list[tuple[int, float]]:
    with store._db.read() as conn:
        return store._search_engine.keyword_list(conn, Ask("l0", query, user, k, None, None, None))


# SQLite only: checks the FTS5 tables' rowid ranges, bm25() and sqlite_master.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_keyword_lists_match_bm25_over_the_users_own_messages(store: Store) -> None:
    _fill(store)
    checked = 0
    for user in _USERS:
        for q in _QUERIES:
            got = _keyword(store, q, user, 10)
            want = _reference(store, q, user, 10)
            assert [i for i, _ in got] == [i for i, _ in want], (user, q)
            assert [s for _, s in got] == [s for _, s in want], (user, q)
            checked += bool(got)
    assert checked >= len(_USERS) * (len(_QUERIES) - 1)


def test_a_user_never_sees_another_users_rows(store: Store) -> None:
    _fill(store)
    store.capture("dave", "s0", [{"role": "user", "content": "only dave talks about zeppelins"}])
    with store._db.read() as conn:
        owner = dict(conn.execute(text("SELECT id, user_id FROM l0_messages")).all())
    for user in _USERS:
        for q in (*_QUERIES, "zeppelins"):
            for strategy in ("keyword", "hybrid"):
                hits = store.search_conversations(user, q, limit=20, strategy=strategy)
                assert all(owner[h.id] == user and h.user_id == user for h in hits), (user, q)
    assert store.search_conversations("alice", "zeppelins", strategy="keyword") == []
    assert [h.user_id for h in store.search_conversations("dave", "zeppelins")] == ["dave"]
    assert _keyword(store, "pottery", "nobody", 10) == []


# SQLite only: checks the FTS5 tables' rowid ranges, bm25() and sqlite_master.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_fts_rows_sit_in_their_users_range_and_hold_no_text(store: Store) -> None:
    _fill(store)
    with store._db.read() as conn:
        names = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
        assert "l0_fts_content" not in names  # contentless: the text is stored once
        owner = dict(conn.execute(text("SELECT id, user_id FROM l0_messages")).all())
        keys = [
            int(r[0])
            for r in conn.execute(
                text("SELECT rowid FROM l0_fts WHERE l0_fts MATCH :q"), {"q": '"pottery"'}
            )
        ]
        spans = {u: user_fts_range(conn, u) for u in _USERS}
        plan = " ".join(
            str(r[3])
            for r in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN SELECT rowid FROM l0_fts WHERE l0_fts MATCH ? "
                "AND rowid BETWEEN ? AND ?",
                ('"pottery"', 1, 2),
            )
        )
    assert len(keys) >= len(_USERS) * 4
    for key in keys:
        user = owner[key & ((1 << SLOT_SHIFT) - 1)]
        lo, hi = spans[user] or (0, -1)
        assert lo <= key <= hi
    # FTS5 takes the rowid bounds into its own plan (M = MATCH, > < = bounds),
    # so only the range's postings are read.
    assert ":M" in plan and ">" in plan and "<" in plan


def test_rebuild_gives_the_same_keys(store: Store) -> None:
    _fill(store)
    before = {u: _keyword(store, "pottery class Anna", u, 10) for u in _USERS}
    with store._db.read() as conn:
        slots = conn.execute(text("SELECT user_id, slot FROM l0_user_slots ORDER BY slot")).all()
    store.rebuild()
    with store._db.read() as conn:
        again = conn.execute(text("SELECT user_id, slot FROM l0_user_slots ORDER BY slot")).all()
    assert (
        [tuple(r) for r in again]
        == [tuple(r) for r in slots]
        == [(u, i) for i, u in enumerate(_USERS, start=1)]
    )
    assert {u: _keyword(store, "pottery class Anna", u, 10) for u in _USERS} == before


# SQLite only: checks the FTS5 tables' rowid ranges, bm25() and sqlite_master.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_migration_converts_an_existing_file(target: str, settings: Settings) -> None:
    with Store.open(target, settings=settings) as s:
        _fill(s)
        before = {(u, q): _keyword(s, q, u, 10) for u in _USERS for q in _QUERIES}
        migrate.downgrade(s._db, "0010", owners=migrate.projection_tables(default_projections()))
        with s._db.read() as conn:
            names = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
            # The earlier layout: FTS keeps its own copy, rowid = message id.
            assert "l0_fts_content" in names and "l0_user_slots" not in names
            n_old = conn.execute(text("SELECT count(*) FROM l0_fts_content")).scalar_one()
            assert n_old == conn.execute(text("SELECT count(*) FROM l0_messages")).scalar_one()
    with Store.open(target, settings=settings) as s:
        assert migrate.current_revision(s._db) == migrate.head_revision()
        with s._db.read() as conn:
            names = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
        assert "l0_fts_content" not in names
        assert {(u, q): _keyword(s, q, u, 10) for u in _USERS for q in _QUERIES} == before
        # New captures continue the slots the migration handed out.
        s.capture("erin", "s0", [{"role": "user", "content": "erin's pottery class"}])
        assert [h.user_id for h in s.search_conversations("erin", "pottery")] == ["erin"]
