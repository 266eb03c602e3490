"""Derivation on both backends: L1/L2/L3 from a scripted model, the pipeline's
queue, recall, and a rebuild that replays outcomes without the model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memstore import Settings
from memstore.bench.fakeopenai import FakeOpenAI
from memstore.derive import api
from memstore.store import Store
from tests.derive_support import ScriptedLLM, say, snapshot


@pytest.fixture
def llm() -> Iterator[tuple[FakeOpenAI, ScriptedLLM]]:
    script = ScriptedLLM()
    with FakeOpenAI(chat=script) as fake:
        yield fake, script


@pytest.fixture
def dstore(target: str, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]) -> Iterator[Store]:
    s = settings.replace(
        llm_base_url=llm[0].base_url, llm_model="fake-model", llm_max_retries=1, llm_timeout_s=5.0
    )
    with Store.open(target, settings=s) as store:
        yield store


def test_layers_recall_and_rebuild(dstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM]) -> None:
    fake, script = llm
    say(dstore, "alice", "s1", "Hi, my name is Alice.", "I live in Berlin and I'm vegetarian.")
    say(dstore, "alice", "s1", "I like running.", "I train for the Berlin marathon.")
    assert api.run_l1(dstore._derivation, "alice", "s1").new_memories == 5
    say(dstore, "alice", "s2", "My name is Alice, remember?", "I moved to Munich in April.")
    say(dstore, "alice", "s2", "I'm vegan now.", "I run marathons every year.")
    assert api.run_l1(dstore._derivation, "alice", "s2").ok
    live = {m["content"] for m in api.list_memories(dstore._derivation, "alice")}
    assert "The user lives in Munich (moved from Berlin)." in live
    assert "The user lives in Berlin." not in live  # superseded through keyword dedup
    assert api.run_l2(dstore._derivation, "alice").ok
    assert api.run_l3(dstore._derivation, "alice").ok
    assert "Munich" in (api.get_persona(dstore._derivation, "alice") or "")
    r = dstore.recall("alice", "Where does Alice live now?")
    assert "Munich" in r.text

    before = snapshot(dstore)
    calls = len(script.calls)
    fake.stop()
    dstore.rebuild()
    assert snapshot(dstore) == before and len(script.calls) == calls


def test_pipeline_queue_derives_once(dstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM]) -> None:
    _, script = llm
    # The warm-up threshold is one round: the first capture enqueues extraction.
    dstore.capture_turn("alice", "s1", "Hi, my name is Alice.", "Hello Alice")
    dstore.run_pipeline("alice", wait=True)
    first = len(script.calls)
    assert first > 0
    assert any("Alice" in m["content"] for m in api.list_memories(dstore._derivation, "alice"))
    dstore.run_pipeline("alice", wait=True)  # nothing queued: no second extraction
    assert len(script.calls) == first
