from __future__ import annotations

from pathlib import Path

import pytest

from memstore.store import Store

pytestmark = pytest.mark.both_backends

MARKER = "Zqxj7781 platypus-marmalade secret"
CJK_MARKER = "鸭嘴兽果酱秘密"


def _file_bytes(path: Path) -> bytes:
    data = b""
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists():
            data += p.read_bytes()
    return data


# SQLite only: reads the database file and its WAL (PostgreSQL: contract/test_erasure_files.py).
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_forget_user_leaves_no_bytes_and_keeps_everyone_else(store: Store, target: str) -> None:
    store.capture_turn("victim", "s1", f"My password hint is {MARKER}", "I will remember")
    store.capture_turn("victim", "s2", f"我的秘密是{CJK_MARKER}", "好的")
    store.capture_turn("keeper", "s1", "I like green tea", "ok")
    store.reindex()
    assert store.search_conversations("victim", "platypus")
    assert MARKER.encode() in _file_bytes(target)  # in the main file or the WAL

    report = store.forget_user("victim")
    assert report.events_removed == 2 and report.embeddings_removed >= 4

    data = _file_bytes(target)
    for needle in (MARKER, "platypus", "marmalade", CJK_MARKER, "鸭嘴"):
        assert needle.encode("utf-8") not in data, needle
    assert store.search_conversations("victim", "platypus") == []
    assert [e.type for e in store.read_events(user_id="victim")] == []
    # a tombstone records that it happened, without content
    (tomb,) = store.read_events(types=["erasure.user"])
    assert tomb.payload.to_dict()["erased_user_id"] == "victim"
    # the other user is untouched, for keyword and vector search
    store.reindex()
    for strategy in ("keyword", "vector", "hybrid"):
        hits = store.search_conversations("keeper", "green tea", strategy=strategy)
        assert hits and hits[0].text == "I like green tea"


def test_forget_user_survives_reopen_and_rebuild(store: Store, target: str) -> None:
    store.capture_turn("victim", "s1", MARKER, "ok")
    store.forget_user("victim")
    store.rebuild()
    assert store.search_conversations("victim", "platypus", strategy="keyword") == []
    store.close()
    with Store.open(target, settings=store.settings) as again:
        assert again.read_events(user_id="victim") == []


def test_positions_never_repeat_after_erasing_the_newest_events(store: Store) -> None:
    store.capture_turn("keep", "s", "first", "ok")
    store.capture_turn("gone", "s", "second", "ok")
    store.capture_turn("gone", "s", "third", "ok")
    highest = store.event_count()
    store.forget_user("gone")
    (tomb,) = store.read_events(types=["erasure.user"])
    assert tomb.position > highest
    res = store.capture_turn("keep", "s", "fourth", "ok")
    assert res.event_position is not None and res.event_position > tomb.position
