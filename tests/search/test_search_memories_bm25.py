"""Keyword search of memories ranks with the user's own BM25 statistics and
reads only the user's rows of ``l1_fts`` (issues 10 and 14).

The oracle is FTS5 itself: a scratch FTS5 table holding only one user's
``l1_fts`` rows ranks them with ``bm25()``; the per-user search must give the
same ids and scores, and on a store with one user the same as ``bm25()``
over the store's own table. The keys and counts behind it
(``l1_user_slots``, ``l1_term_repeats``) must stay right through updates,
retirements, re-derives, rebuilds, erasure and the migration.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import text

from memstore.config import Settings
from memstore.db import migrate
from memstore.derive.messages.projection import SLOT_SHIFT
from memstore.search import bm25, bm25_memories
from memstore.search.engine import _L1_ACTIVE
from memstore.store import Store, default_projections
from memstore.text import build_match
from memstore.text.terms import document_stats

OWNERS = migrate.projection_tables(default_projections())
_LOW = (1 << SLOT_SHIFT) - 1

_FACTS = (
    "The user is allergic to peanuts; peanut butter makes the user sick, peanuts everywhere.",
    "The user runs every morning and ran the Lisbon marathon twice.",
    "The user drinks green tea, never coffee; green tea in the morning.",
    "The user's dog is called Rex and loves the garden.",
    "用户每天早上喝咖啡，咖啡让用户清醒。",
    "The user takes pottery classes in Lisbon with Anna.",
    "The user prefers short answers.",
    "Café au lait at the Café Tortoni with crème brûlée.",
    " ".join(f"word{i % 40} filler" for i in range(160)),  # > 127 tokens in a column
)
_QUERIES = (
    "peanut allergy",
    "green tea morning",
    "Lisbon marathon",
    "dog garden",
    "咖啡",
    "咖",
    "pottery Anna Lisbon",
    "the user",
    "cafe creme brulee",
    "word7 filler",
    'peanuts" OR "x',
)
_USERS = ("alice", "bob", "carol")


def _fill(store: Store, user: str, facts: tuple[str, ...] = _FACTS) -> list[str]:
    ids = [store.write_memory(user, "add", f"{f} ({user})") for f in facts]
    return [i for i in ids if i is not None]


def _fill_all(store: Store) -> None:
    for n, user in enumerate(_USERS):
        # Different amounts per user, so their statistics differ.
        _fill(store, user, _FACTS[: len(_FACTS) - n])
        _fill(store, user, _FACTS[n : n + 3])


def _per_user(
    store: Store, query: str, user: str, k: int = 40, shortcut: bool = False
) -> list[tuple[int, float]]:
    with store._db.read() as conn:
        return bm25_memories.keyword_memories(
            conn, query, user, k, live=_L1_ACTIVE, sole_user_shortcut=shortcut
        )


def _live(store: Store, user: str) -> set[int]:
    with store._db.read() as conn:
        sql = f"SELECT m.id FROM l1_memories m WHERE m.user_id = :u AND {_L1_ACTIVE}"
        return {int(r[0]) for r in conn.execute(text(sql), {"u": user})}


def _reference(store: Store, query: str, user: str, k: int = 40) -> list[tuple[int, float]]:
    """FTS5's bm25() over a table of ``user``'s own l1_fts rows (every
    generation, as the per-user statistics count them), live memories kept."""
    with store._db.read() as conn:
        slot = conn.execute(
            text("SELECT slot FROM l1_user_slots WHERE user_id = :u"), {"u": user}
        ).scalar()
        if slot is None:
            return []
        lo = int(slot) << SLOT_SHIFT
        rows = conn.execute(
            text("SELECT rowid, text, cjk, stem FROM l1_fts WHERE rowid BETWEEN :lo AND :hi"),
            {"lo": lo, "hi": lo + _LOW},
        ).all()
    ref = sqlite3.connect(":memory:")
    ref.execute(
        "CREATE VIRTUAL TABLE f USING fts5(text, cjk, stem, "
        "tokenize='unicode61 remove_diacritics 2')"
    )
    ref.executemany(
        "INSERT INTO f(rowid, text, cjk, stem) VALUES (?, ?, ?, ?)",
        [(int(r[0]) - lo, r[1], r[2], r[3]) for r in rows],
    )
    match = build_match(query)
    assert match is not None
    out = ref.execute(
        "SELECT rowid, bm25(f, 1.0, 1.0, 1.0) AS s FROM f WHERE f MATCH ? ORDER BY s, rowid",
        (match,),
    ).fetchall()
    ref.close()
    live = _live(store, user)
    return [(int(i), float(s)) for i, s in out if int(i) in live][:k]


def check_index(store: Store) -> None:
    """Every l1_fts row sits in its owner's range under its memory's id, the
    rows are exactly the active memories, and each user's counts and repeats
    are FTS5's own figures for those rows."""
    with store._db.read() as conn:
        slots = {
            int(s): (str(u), int(d), int(t))
            for u, s, d, t in conn.execute(
                text("SELECT user_id, slot, docs, tokens FROM l1_user_slots")
            )
        }
        memories = {
            int(i): (str(u), str(st))
            for i, u, st in conn.execute(text("SELECT id, user_id, status FROM l1_memories"))
        }
        rows = conn.execute(
            text(
                "SELECT f.rowid, f.text, f.cjk, f.stem, d.sz FROM l1_fts f "
                "JOIN l1_fts_docsize d ON d.id = f.rowid"
            )
        ).all()
        repeats = dict(conn.execute(text("SELECT key, repeats FROM l1_term_repeats")).all())
    assert {u for u, _ in memories.values()} == {u for u, _, _ in slots.values()}
    counted: dict[int, list[int]] = {s: [0, 0] for s in slots}
    want_repeats = {}
    for key, latin, cjk, stem, size in rows:
        slot, row_id = int(key) >> SLOT_SHIFT, int(key) & _LOW
        assert memories[row_id] == (slots[slot][0], "active"), key
        length, rep = document_stats(latin, cjk, stem)
        assert length == bm25._doc_length(size), key  # FTS5's own length
        counted[slot][0] += 1
        counted[slot][1] += length
        if rep is not None:
            want_repeats[int(key)] = rep
    active = {i for i, (_, st) in memories.items() if st == "active"}
    assert {int(r[0]) & _LOW for r in rows} == active
    assert {s: [d, t] for s, (_, d, t) in slots.items()} == counted
    assert repeats == want_repeats


def test_one_user_store_ranks_exactly_as_fts5_bm25(store: Store) -> None:
    ids = _fill(store, "solo")
    _fill(store, "solo", _FACTS[:4])
    store.write_memory(
        "solo", "replace", "The user walks the dog Rex twice a day.", old_content=_FACTS[3]
    )
    store.forget_memory("solo", ids[1])
    check_index(store)
    compared = 0
    for q in _QUERIES:
        want = _reference(store, q, "solo")
        with store._db.read() as conn:
            lo = int(conn.execute(text("SELECT slot FROM l1_user_slots")).scalar_one())
            lo <<= SLOT_SHIFT
            live = f"m.user_id = 'solo' AND {_L1_ACTIVE}"
            table = [
                (int(i), float(s))
                for i, s in conn.exec_driver_sql(
                    "SELECT f.rowid - ?, bm25(l1_fts, 1.0, 1.0, 1.0) AS s FROM l1_fts f "
                    f"JOIN l1_memories m ON m.id = f.rowid - ? WHERE l1_fts MATCH ? AND {live} "
                    "ORDER BY s, f.rowid LIMIT 40",
                    (lo, lo, build_match(q)),
                )
            ]
        assert _per_user(store, q, "solo") == want == table, q
        assert _per_user(store, q, "solo", shortcut=True) == want, q
        compared += bool(want)
    assert compared >= len(_QUERIES) - 1


def test_each_user_ranks_with_their_own_statistics(store: Store) -> None:
    _fill_all(store)
    check_index(store)
    compared = 0
    for user in _USERS:
        for q in _QUERIES:
            got = _per_user(store, q, user, 10)
            assert got == _reference(store, q, user, 10), (user, q)
            # The engine's list is the same one.
            hits = store.search_memories(user, q, limit=10, strategy="keyword")
            assert [h.id for h in hits] == [i for i, _ in got]
            compared += bool(got)
    assert compared >= len(_USERS) * (len(_QUERIES) - 1)
    assert _per_user(store, "peanut", "nobody") == []


def test_a_users_memories_do_not_depend_on_other_users(store: Store) -> None:
    _fill(store, "kim")

    def ranked() -> list[list[tuple[str, float]]]:
        return [
            [(h.text, h.score) for h in store.search_memories(
                "kim", q, limit=10, strategy="keyword")]
            for q in _QUERIES
        ]  # fmt: skip

    def similar() -> list[list[tuple[str, str]]]:
        from memstore.derive.queries import fts_memories

        with store._db.read() as conn:
            return [fts_memories(conn, "kim", 0, q, 5) for q in _QUERIES]

    alone, alone_similar = ranked(), similar()
    raw = [_per_user(store, q, "kim") for q in _QUERIES]
    assert sum(map(bool, alone)) >= len(_QUERIES) - 1
    for user in ("late1", "late2"):
        _fill(store, user, _FACTS * 2)
        _fill(store, user, ("The user is allergic to peanuts and green tea.",) * 3)
    assert ranked() == alone
    assert similar() == alone_similar
    assert [_per_user(store, q, "kim") for q in _QUERIES] == raw
    for q in _QUERIES:
        for strategy in ("keyword", "hybrid"):
            hits = store.search_memories("late1", q, limit=20, strategy=strategy)
            assert {h.user_id for h in hits} <= {"late1"}


def test_updates_retirements_and_generations_keep_the_counts(store: Store) -> None:
    _fill_all(store)
    ids = _fill(store, "bob", ("The user's sister lives in Porto; Porto is lovely.",))
    store.write_memory("bob", "replace", "The user's sister moved to Faro.", old_content=_FACTS[1])
    store.write_memory("bob", "remove", "", old_content=_FACTS[2])
    store.forget_memory("bob", ids[0])
    check_index(store)
    # A re-derive from L2 copies the memories into a new generation: both
    # generations' rows count, only the active one is returned.
    gen = store.rederive("alice", from_layer="l2")
    assert gen >= 1
    check_index(store)
    for q in _QUERIES:
        got = _per_user(store, q, "alice")
        assert got == _reference(store, q, "alice"), q
        live = _live(store, "alice")
        assert all(i in live for i, _ in got)


def test_rebuild_and_erasure_keep_the_keys(store: Store) -> None:
    _fill_all(store)
    store.forget_memory("carol", _fill(store, "carol", ("The user keeps bees.",))[0])

    def state() -> tuple[list[tuple[object, ...]], dict[tuple[str, str], list[tuple[str, float]]]]:
        with store._db.read() as conn:
            slots = [tuple(r) for r in conn.execute(text("SELECT * FROM l1_user_slots"))]
        results = {
            (u, q): [(h.text, h.score) for h in store.search_memories(
                u, q, limit=10, strategy="keyword")]
            for u in _USERS
            for q in _QUERIES
        }  # fmt: skip
        return sorted(slots), results

    before = state()
    store.rebuild()
    check_index(store)
    assert state() == before
    store.forget_user("alice")
    check_index(store)
    slots, results = state()
    # Erasure replays what is left: the others keep their order and results.
    assert [r[0] for r in slots] == ["bob", "carol"]
    assert [r[1] for r in slots] == [1, 2]
    for (user, q), hits in before[1].items():
        if user != "alice":
            assert results[(user, q)] == hits, (user, q)
    assert all(not results[("alice", q)] for q in _QUERIES)


def _layout(store: Store) -> list[list[tuple[object, ...]]]:
    with store._db.read() as conn:
        return [
            [tuple(r) for r in conn.execute(text(sql))]
            for sql in (
                "SELECT * FROM l1_user_slots ORDER BY slot",
                "SELECT * FROM l1_term_repeats ORDER BY key",
                "SELECT rowid, text, cjk, stem FROM l1_fts ORDER BY rowid",
            )
        ]


def test_migration_rekeys_an_existing_file(db_path: Path, settings: Settings) -> None:
    with Store.open(db_path, settings=settings) as s:
        _fill_all(s)
        s.forget_memory("bob", _fill(s, "bob", ("The user keeps bees.",))[0])
        s.rederive("carol", from_layer="l2")
        before = {(u, q): _per_user(s, q, u) for u in _USERS for q in _QUERIES}
        layout = _layout(s)
        migrate.downgrade(s._db, "0019_storage", owners=OWNERS)
        with s._db.read() as conn:
            names = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
            assert "l1_user_slots" not in names and "l1_term_repeats" not in names
            # The earlier layout: rowid = l1_memories.id, active rows only.
            keys = {int(r[0]) for r in conn.execute(text("SELECT rowid FROM l1_fts"))}
            active = conn.execute(text("SELECT id FROM l1_memories WHERE status = 'active'"))
            assert keys == {int(r[0]) for r in active}
        migrate.upgrade(s._db, owners=OWNERS)
        # What the migration wrote, before any rebuild: the keys, slots and
        # counts the projection writes.
        check_index(s)
        assert _layout(s) == layout
        assert {(u, q): _per_user(s, q, u) for u in _USERS for q in _QUERIES} == before
    with Store.open(db_path, settings=settings) as s:  # rebuilds the L1 projection
        check_index(s)
        assert _layout(s) == layout
        assert {(u, q): _per_user(s, q, u) for u in _USERS for q in _QUERIES} == before
        # New memories continue the slots the migration handed out.
        s.write_memory("erin", "add", "Erin takes pottery classes.")
        check_index(s)
        assert [h.user_id for h in s.search_memories("erin", "pottery")] == ["erin"]
