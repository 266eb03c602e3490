"""Ids are refused, never rewritten into another user's id, and stream names
do not collide."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text

from memstore import Settings
from memstore.db import migrate
from memstore.db.engine import SqliteDatabase
from memstore.derive.events import derive_stream
from memstore.derive.messages.events import l0_stream
from memstore.errors import InvalidIdError, InvalidInputError
from memstore.store import Store, default_projections

pytestmark = pytest.mark.both_backends

ALIASES = ["alice ", " alice", "a\x00lice", "alice\n", "ali\x1bce", "\ud800x", "\udc00x", "a\x7fb"]


def _owners() -> dict[str, str]:
    """Which projection owns which table: what ``Store.open`` tells the migrations."""
    return migrate.projection_tables(default_projections())


@pytest.mark.parametrize("bad", ALIASES)
def test_ids_that_used_to_alias_another_user_are_refused(store: Store, bad: str) -> None:
    store.capture_turn("alice", "s1", "my locker code is 4471", "ok")
    with pytest.raises(InvalidIdError):
        store.capture_turn(bad, "s1", "I am not alice", "ok")
    with pytest.raises(InvalidIdError):
        store.search_conversations(bad, "locker")
    with pytest.raises(InvalidIdError):
        store.recall(bad, "locker")
    with pytest.raises(InvalidIdError):
        store.list_memories(bad)
    with pytest.raises(InvalidIdError):
        store.forget_user(bad)
    with pytest.raises(InvalidIdError):
        store.capture_turn("bob", bad, "session ids too", "ok")
    # nothing was stored or erased under alice's id
    assert [e.user_id for e in store.read_events(types=["l0.captured"])] == ["alice"]
    assert store.search_conversations("alice", "locker", strategy="keyword")


def test_two_lone_surrogates_are_not_one_user(store: Store) -> None:
    for bad in ("\ud800x", "\udc00x"):
        with pytest.raises(InvalidIdError, match="surrogate"):
            store.capture_turn(bad, "s", "hello", "ok")
    assert store.event_count() == 0


def test_valid_unusual_ids_are_kept_exactly(store: Store) -> None:
    ids = ["Alice Smith", "用户-42", "org/team/alice", "50%", "e\u0301", "\u00e9", "😀"]
    for uid in ids:
        store.capture_turn(uid, "s/1", f"hello from {uid}", "ok")
    assert sorted({e.user_id for e in store.read_events()}) == sorted(ids)
    # NFC and NFD spellings are different ids, never merged
    assert len(store.read_events(user_id="e\u0301")) == 1


def test_message_ids_are_refused_not_rewritten(store: Store) -> None:
    with pytest.raises(InvalidIdError, match="message 0 id"):
        store.capture("u", "s", [{"role": "user", "content": "x", "id": "m1 "}])
    with pytest.raises(InvalidIdError, match="message 0 id"):
        store.capture("u", "s", [{"role": "user", "content": "x", "id": ["m1"]}])
    res = store.capture("u", "s", [{"role": "user", "content": "x", "id": 7}])
    assert res.stored == ["7"]


def test_stream_names_of_different_users_do_not_collide(store: Store) -> None:
    store.capture_turn("a", "b/s1", "I am a in session b/s1", None)
    store.capture_turn("a/b", "s1", "I am a/b in session s1", None)
    one = store.read_stream(l0_stream("a", "b/s1"))
    two = store.read_stream(l0_stream("a/b", "s1"))
    assert [e.user_id for e in one] == ["a"] and [e.user_id for e in two] == ["a/b"]
    assert l0_stream("a", "b/s1") != l0_stream("a/b", "s1")
    assert store.read_stream("l0/a/b/s1") == []
    assert derive_stream("a%2Fb") != derive_stream("a/b")
    # plain ids keep the names existing files already use
    assert l0_stream("alice", "s1") == "l0/alice/s1"
    assert derive_stream("alice") == "derive/alice"


def _revision_before_0010() -> str:
    script = ScriptDirectory.from_config(migrate._config())
    down = script.get_revision("0010").down_revision
    assert isinstance(down, str)
    return down


# SQLite only (a file at db_path): the merged stream names are what SQLite
# files written before revision 0010 hold; PostgreSQL stores came later and
# never had them (0010's downgrade keeps the escaped names there).
def test_migration_splits_streams_that_old_names_merged(db_path: Path, settings: Settings) -> None:
    with Store.open(db_path, settings=settings) as store:
        store.capture_turn("a", "b/s1", "I am a", None)
        store.capture_turn("a/b", "s1", "I am a/b", None)
        store.capture_turn("50%", "x", "percent user", None)
        store.capture_turn("alice", "s1", "plain user", None)
        store.write_memory("a/b", "add", "The user is a/b.")
    db = SqliteDatabase(db_path)
    try:
        migrate.downgrade(db, _revision_before_0010(), owners=_owners())
        # What the old code wrote: one stream for both users, seqs interleaved.
        with db.write() as conn:
            conn.execute(
                text(
                    "UPDATE events SET stream = 'l0/a/b/s1', seq = 2 "
                    "WHERE user_id = 'a/b' AND type = 'l0.captured'"
                )
            )
            conn.execute(
                text(
                    "UPDATE events SET stream = 'l0/a/b/s1', seq = 1 "
                    "WHERE user_id = 'a' AND type = 'l0.captured'"
                )
            )
            rows = conn.execute(text("SELECT stream FROM events ORDER BY position")).scalars().all()
        assert "derive/a/b" in rows and "l0/50%/x" in rows
    finally:
        db.close()
    with Store.open(db_path, settings=settings) as store:
        assert [e.user_id for e in store.read_stream(l0_stream("a", "b/s1"))] == ["a"]
        assert [e.user_id for e in store.read_stream(l0_stream("a/b", "s1"))] == ["a/b"]
        assert [e.user_id for e in store.read_stream(l0_stream("50%", "x"))] == ["50%"]
        assert [e.user_id for e in store.read_stream("l0/alice/s1")] == ["alice"]
        assert len(store.read_stream(derive_stream("a/b"))) == 1
        # appending continues each stream after its own head
        store.capture_turn("a/b", "s1", "again", None)
        assert len(store.read_stream(l0_stream("a/b", "s1"))) == 2
        assert store.list_memories("a/b")[0]["content"] == "The user is a/b."


def test_error_class_is_an_input_error(store: Store) -> None:
    with pytest.raises(InvalidInputError):
        store.capture_turn(" alice", "s", "x")
