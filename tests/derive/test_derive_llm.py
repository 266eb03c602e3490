"""The LLM deriver end to end against a real HTTP server on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memstore import Settings
from memstore import recall as recall_api
from memstore.bench.fakeopenai import FakeOpenAI
from memstore.derive import api
from memstore.derive.events import L1Extracted, PersonaUpdated, RunFailed, ScenesUpdated
from memstore.derive.queries import l1_cursor
from memstore.store import Store
from tests.backends import Targets
from tests.derive_support import ScriptedLLM, open_store, say, snapshot

pytestmark = pytest.mark.both_backends


@pytest.fixture
def llm() -> Iterator[tuple[FakeOpenAI, ScriptedLLM]]:
    script = ScriptedLLM()
    with FakeOpenAI(chat=script) as fake:
        yield fake, script


@pytest.fixture
def lstore(
    new_target: Targets, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> Iterator[Store]:
    fake, _ = llm
    s = settings.replace(
        llm_base_url=fake.base_url, llm_model="fake-model", llm_max_retries=1, llm_timeout_s=5.0
    )
    store = open_store(new_target("m.db"), s)
    try:
        yield store
    finally:
        store.close()


def _contents(store: Store, user: str = "alice") -> list[str]:
    return [m["content"] for m in api.list_memories(store._derivation, user)]


def test_multi_session_conversation_gives_memories_scenes_persona_and_recall(
    lstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, script = llm
    say(lstore, "alice", "s1", "Hi, my name is Alice.", "I live in Berlin and I'm vegetarian.")
    say(lstore, "alice", "s1", "I like running.", "I train for the Berlin marathon.")
    assert api.run_l1(lstore._derivation, "alice", "s1").new_memories == 5
    say(lstore, "alice", "s2", "My name is Alice, remember?", "I moved to Munich in April.")
    say(lstore, "alice", "s2", "I'm vegan now.", "I run marathons every year.")
    say(lstore, "alice", "s2", "Back from Lisbon! Please answer in English always.")
    out = api.run_l1(lstore._derivation, "alice", "s2")
    assert out.ok and out.events_appended == 1

    listed = api.list_memories(lstore._derivation, "alice", include_retired=True)
    mems = {m["content"]: m for m in listed}
    assert mems["The user's name is Alice."]["status"] == "active"  # skip kept one copy
    assert list(mems).count("The user's name is Alice.") == 1
    munich = mems["The user lives in Munich (moved from Berlin)."]
    assert mems["The user lives in Berlin."]["retired_by"] == munich["memory_id"]  # supersede
    assert "The user is vegan (was vegetarian)." in mems  # update rewrote in place
    assert "The user is vegetarian." not in mems
    merged = mems["The user loves running and runs a marathon every year, including Berlin."]
    assert mems["The user likes running."]["status"] == "retired"  # merge
    assert len(merged["source_message_ids"]) == 3  # provenance of all three
    lisbon = mems["The user travelled to Lisbon in May 2023."]
    assert lisbon["type"] == "episodic" and lisbon["activity_start"] == "2023-05-01"
    actions = [
        d["action"]
        for e in lstore.read_events(types=[L1Extracted.TYPE])
        for d in e.payload.decisions  # type: ignore[attr-defined]
    ]
    assert {"store", "skip", "supersede", "update", "merge"} <= set(actions)

    l2 = api.run_l2(lstore._derivation, "alice")
    assert l2.ok and l2.persona_requested
    scenes = {s["name"]: s for s in api.list_scenes(lstore._derivation, "alice")}
    assert {"About Alice", "Food", "Sport", "Travel", "Working style"} <= set(scenes)
    assert api.persona_due(lstore._derivation, "alice")
    assert api.run_l3(lstore._derivation, "alice").ok
    persona = api.get_persona(lstore._derivation, "alice") or ""
    assert "Munich" in persona and not api.persona_due(lstore._derivation, "alice")
    ev = lstore.read_events(types=[PersonaUpdated.TYPE])[-1].payload
    assert ev.deriver == "llm" and ev.model == "fake-model"  # type: ignore[attr-defined]

    lstore.reindex()
    r = recall_api.recall(lstore._derivation, "Where does Alice live now?", user_id="alice")
    assert "<user-persona>" in r.text and "<scene-navigation>" in r.text
    assert "Munich" in r.text and "About Alice" in r.navigation
    assert any("Munich" in m.content for m in r.memories)

    # A rebuild replays outcomes: identical tables with the LLM server gone.
    before = snapshot(lstore)
    calls = len(script.calls)
    fake.stop()
    lstore.rebuild()
    assert snapshot(lstore) == before
    assert len(script.calls) == calls


def test_malformed_json_fails_without_losing_anything(
    lstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    _, script = llm
    script.override["extract"] = "this is not {json"
    say(lstore, "alice", "s1", "Hi, my name is Alice.")
    first = api.run_l1(lstore._derivation, "alice", "s1")
    second = api.run_l1(lstore._derivation, "alice", "s1")
    assert not first.ok and "LLMOutputError" in (first.error or "")
    fails = [e.payload for e in lstore.read_events(types=[RunFailed.TYPE])]
    assert [f.attempt for f in fails] == [1, 2]  # type: ignore[attr-defined]
    assert second.ok is False and _contents(lstore) == []
    with lstore._db.read() as conn:
        assert l1_cursor(conn, "alice", "s1", 0) == 0
    del script.override["extract"]
    ok = api.run_l1(lstore._derivation, "alice", "s1")
    assert ok.ok and _contents(lstore) == ["The user's name is Alice."]


def test_server_error_then_success_is_retried(
    lstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, _ = llm
    fake.fail_next(500, retry_after=0.01)
    say(lstore, "alice", "s1", "Hi, my name is Alice.")
    assert api.run_l1(lstore._derivation, "alice", "s1").ok
    assert _contents(lstore) == ["The user's name is Alice."]


def test_timeout_is_a_failed_run_and_the_next_run_recovers(
    new_target: Targets, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, _ = llm
    s = settings.replace(
        llm_base_url=fake.base_url, llm_model="fake-model", llm_max_retries=0, llm_timeout_s=0.3
    )
    with open_store(new_target("t.db"), s) as store:
        say(store, "alice", "s1", "Hi, my name is Alice.")
        fake.delay_next(3.0)
        out = api.run_l1(store._derivation, "alice", "s1")
        assert not out.ok and "timed out" in (out.error or "")
        assert _contents(store) == []
        assert api.run_l1(store._derivation, "alice", "s1").ok
        assert _contents(store) == ["The user's name is Alice."]


def test_unknown_ids_in_answers_are_dropped(
    lstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    _, script = llm
    script.override["extract"] = (
        '{"memories": [{"content": "The user likes tea.", "type": "persona", '
        '"priority": 60, "scene_name": "Food", "source_message_ids": ["bogus-id"]}]}'
    )
    say(lstore, "alice", "s1", "I like tea.")
    assert api.run_l1(lstore._derivation, "alice", "s1").ok
    [tea] = api.list_memories(lstore._derivation, "alice")
    assert tea["source_message_ids"] and "bogus-id" not in tea["source_message_ids"]

    script.override["extract"] = (
        '{"memories": [{"content": "The user likes green tea.", "type": "persona", '
        '"priority": 60, "scene_name": "Food"}]}'
    )
    script.override["dedup"] = (
        '{"action": "update", "target_ids": ["no-such-memory"], "content": "?"}'
    )
    say(lstore, "alice", "s1", "Green tea especially.")
    assert api.run_l1(lstore._derivation, "alice", "s1").ok
    assert sorted(_contents(lstore)) == ["The user likes green tea.", "The user likes tea."]

    script.override["scenes"] = (
        '{"operations": [{"op": "create", "name": "Drinks", "summary": "s", "body": "- tea", '
        '"memory_ids": ["not-a-memory"]}], "persona_refresh": false}'
    )
    assert api.run_l2(lstore._derivation, "alice").ok
    [scene] = api.list_scenes(lstore._derivation, "alice")
    assert scene["name"] == "Drinks" and scene["memory_ids"] == []
    ops = lstore.read_events(types=[ScenesUpdated.TYPE])[-1].payload.operations  # type: ignore[attr-defined]
    assert [o["op"] for o in ops] == ["create"]
