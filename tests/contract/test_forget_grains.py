"""Erasure at every grain, on both backends: after ``forget_messages``,
``forget_session``, ``forget_memory(with_sources=True)`` and
``forget_between`` the erased text is in no read path (recall, both search
layers and strategies, lists, persona, scenes, navigation, exports, the
agent's tools), what else the user said is still there, a rebuild gives the
same state, and after the compaction (``vacuum_full``) no data file holds a
byte of it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memstore.porting.export import export_events, export_markdown
from memstore.store import Store
from provider import tools
from tests.contract.test_erasure_files import _holding, _store_files

# Lower case: the full-text indexes keep lexemes in lower case; the prefix
# survives any stemming.
SECRET = "quetzalb"
PLACE = "Quetzalburg"
OLD, NEW = "2023-01-10T10:00:00Z", "2024-03-10T10:00:00Z"


def _fill(store: Store) -> dict[str, Any]:
    first = store.capture(
        "alice",
        "s1",
        [
            {"role": "user", "content": f"I live in {PLACE} and I am allergic to peanuts.",
             "timestamp": OLD},
            {"role": "assistant", "content": "Noted.", "timestamp": OLD},
        ],
    )  # fmt: skip
    store.capture(
        "alice",
        "s2",
        [
            {"role": "user", "content": "My sister is called Yolanda.", "timestamp": NEW},
            {"role": "assistant", "content": "Nice name.", "timestamp": NEW},
        ],
    )
    store.capture_turn("bob", "s9", "I like green tea.", "ok")
    for s in ("s1", "s2"):
        store.end_session("alice", s)
    store.run_pipeline()
    store.reindex()
    return {"message": first.stored[0]}


def _reads(store: Store) -> str:
    """Everything a read path shows of alice, as one text."""
    out: list[str] = []
    for q in (f"Where does the user live? {PLACE}", "peanuts allergy", "sister"):
        r = store.recall("alice", q)
        out += [r.text, r.stable, r.per_turn, r.navigation]
        for strategy in ("keyword", "vector", "hybrid"):
            hits = store.search_conversations("alice", q, strategy=strategy, limit=20)
            hits += store.search_memories("alice", q, strategy=strategy, limit=20)
            out += [h.text for h in hits]
        for tool in (tools.MEMORY_SEARCH, tools.CONVERSATION_SEARCH):
            out.append(
                tools.handle(
                    store, tool, {"query": q, "limit": 20}, user_id="alice", session_id="x",
                    read_only=True,
                )
            )  # fmt: skip
    out += [m["content"] for m in store.list_memories("alice", include_retired=True)]
    out.append(store.get_persona("alice") or "")
    for sc in store.list_scenes("alice"):
        out += [sc["name"], sc["summary"], sc["body"]]
        out.append(
            tools.handle(
                store, tools.SCENE_READ, {"name": sc["name"]}, user_id="alice", session_id="x",
                read_only=True,
            )
        )  # fmt: skip
    out.append(export_markdown(store, ["alice"]))
    out += [json.dumps(e, ensure_ascii=False) for e in export_events(store, None)]
    return "\n".join(out)


def _state(store: Store) -> tuple[Any, ...]:
    mems = store.list_memories("alice", include_retired=True)
    scenes = store.list_scenes("alice")
    return (
        sorted((m["memory_id"], m["content"], m["status"]) for m in mems),
        sorted((s["scene_id"], s["name"], s["body"], s["heat"]) for s in scenes),
        store.get_persona("alice"),
    )


def _forget(store: Store, grain: str, ids: dict[str, Any]) -> Any:
    if grain == "messages":
        return store.forget_messages("alice", [ids["message"]], vacuum_full=True)
    if grain == "session":
        return store.forget_session("alice", "s1", vacuum_full=True)
    if grain == "memory":
        [m] = [m for m in store.list_memories("alice") if PLACE in m["content"]]
        return store.forget_memory("alice", m["memory_id"], with_sources=True, vacuum_full=True)
    return store.forget_between("alice", None, "2023-06-01T00:00:00Z", vacuum_full=True)


@pytest.mark.parametrize("grain", ["messages", "session", "memory", "between"])
def test_forget_leaves_no_trace_in_reads_or_files(store: Store, grain: str) -> None:
    ids = _fill(store)
    before = _reads(store).lower()
    assert SECRET in before and "yolanda" in before  # the checks see the text while it lives
    assert PLACE in (store.get_persona("alice") or "")
    assert any(PLACE in s["body"] for s in store.list_scenes("alice"))

    report = _forget(store, grain, ids)
    assert report.compacted, report.detail
    assert report.messages_removed >= 1 and report.memories_removed >= 1
    store.reindex()
    after = _reads(store).lower()
    assert SECRET not in after
    assert "peanut" not in after  # extracted from the same message
    # What else alice said is still there, in every layer.
    assert "yolanda" in after
    assert "Yolanda" in (store.get_persona("alice") or "")
    assert any("Yolanda" in s["body"] for s in store.list_scenes("alice"))
    assert store.search_conversations("bob", "green tea", strategy="keyword")
    if grain == "messages":  # only the one message went
        assert any(
            "Noted." in h.text
            for h in store.search_conversations("alice", "Noted", strategy="keyword")
        )

    state = _state(store)
    store.rebuild()
    assert _state(store) == state
    assert _holding(_store_files(store), SECRET) == []


def test_unknown_targets_are_refused_and_change_nothing(store: Store) -> None:
    from memstore.errors import InvalidIdError, InvalidInputError, NotFoundError

    ids = _fill(store)
    head = store.event_count()
    with pytest.raises(NotFoundError, match="nope"):
        store.forget_messages("alice", [ids["message"], "nope"])
    with pytest.raises(NotFoundError, match="no session"):
        store.forget_session("alice", "s404")
    with pytest.raises(NotFoundError, match="no memory"):
        store.forget_memory("alice", "m404", with_sources=True)
    with pytest.raises(NotFoundError):
        store.forget_session("carol", "s1")
    with pytest.raises(InvalidInputError):
        store.forget_messages("alice", [])
    with pytest.raises(InvalidIdError):
        store.forget_session("alice", " s1")
    with pytest.raises(InvalidInputError, match="before"):
        store.forget_between("alice", "2024-01-01", "2023-01-01")
    report = store.forget_between("alice", "1990-01-01", "1991-01-01")
    assert (report.events_removed, report.events_rewritten, report.tombstone_position) == (0, 0, 0)
    assert store.event_count() == head
    assert PLACE in (store.get_persona("alice") or "")
