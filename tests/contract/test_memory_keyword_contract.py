"""Keyword search of memories per user, the same on SQLite and PostgreSQL:
``l1_fts`` rows are keyed in their user's range (``l1_user_slots``), other
users' memories change nothing, and migration ``0020_l1kw`` re-keys an
existing store both ways."""

from __future__ import annotations

from sqlalchemy import text

from memstore import Settings
from memstore.db import migrate
from memstore.derive.messages.projection import SLOT_SHIFT
from memstore.store import Store, default_projections

OWNERS = migrate.projection_tables(default_projections())
_LOW = (1 << SLOT_SHIFT) - 1
_SAID = (
    "The user flies a red kite over the hill every Sunday.",
    "The user cooks red lentil soup on rainy days.",
    "The user's red kite is called Zephyr.",
    "The user grows lentils and beans in the garden.",
    "The user likes the hill behind the house.",
)
_QUERIES = ("red kite hill", "lentil soup", "kite", "red", "garden beans")


def _memories(store: Store, user: str, facts: tuple[str, ...]) -> None:
    for fact in facts:
        store.write_memory(user, "add", fact)


def _ranked(store: Store, user: str) -> list[list[tuple[str, float]]]:
    return [
        [(h.text, round(h.score, 9)) for h in store.search_memories(
            user, q, strategy="keyword", limit=10)]
        for q in _QUERIES
    ]  # fmt: skip


def _keys_in_ranges(store: Store) -> None:
    """Each l1_fts row's key is its owner's slot above its memory's id."""
    with store._db.read() as conn:
        slots = dict(conn.execute(text("SELECT slot, user_id FROM l1_user_slots")).all())
        owner = dict(
            conn.execute(text("SELECT id, user_id FROM l1_memories WHERE status = 'active'")).all()
        )
        keys = [int(r[0]) for r in conn.execute(text("SELECT rowid FROM l1_fts"))]
    assert sorted(k & _LOW for k in keys) == sorted(owner)
    for key in keys:
        assert slots[key >> SLOT_SHIFT] == owner[key & _LOW], key


def test_a_users_memory_keyword_results_do_not_depend_on_other_users(store: Store) -> None:
    for user in ("early1", "early2"):
        _memories(store, user, _SAID * 2)
    _memories(store, "kim", _SAID)
    alone = _ranked(store, "kim")
    assert all(alone)
    hits = store.search_memories("kim", "red", strategy="keyword", limit=20)
    assert len(hits) == 3 and {h.user_id for h in hits} == {"kim"}
    for user in ("late1", "late2"):
        _memories(store, user, _SAID + _SAID[:2])
    assert _ranked(store, "kim") == alone
    _keys_in_ranges(store)
    assert store.search_memories("nobody", "kite", strategy="keyword") == []


def test_migration_rekeys_memories_both_ways(target: str, settings: Settings) -> None:
    with Store.open(target, settings=settings) as s:
        _memories(s, "ann", _SAID)
        _memories(s, "ben", _SAID[1:])
        gone = s.write_memory("ann", "add", "The user's red bicycle was stolen.")
        assert gone is not None
        s.forget_memory("ann", gone)
        before = {u: _ranked(s, u) for u in ("ann", "ben")}
        migrate.downgrade(s._db, "0019_storage", owners=OWNERS)
        with s._db.read() as conn:
            keys = {int(r[0]) for r in conn.execute(text("SELECT rowid FROM l1_fts"))}
            active = conn.execute(text("SELECT id FROM l1_memories WHERE status = 'active'"))
            assert keys == {int(r[0]) for r in active}  # rowid = l1_memories.id again
        migrate.upgrade(s._db, owners=OWNERS)
        _keys_in_ranges(s)  # as the migration left them
        with s._db.read() as conn:
            counts = dict(conn.execute(text("SELECT user_id, docs FROM l1_user_slots")).all())
        assert counts == {"ann": len(_SAID), "ben": len(_SAID) - 1}
    with Store.open(target, settings=settings) as s:
        _keys_in_ranges(s)
        assert {u: _ranked(s, u) for u in ("ann", "ben")} == before
