"""LLM faults through the fake server: a run fails (after retrying what is worth
retrying) and nothing is lost; it never counts as "nothing to remember"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstore import Settings
from memstore.bench.fakeopenai import FakeOpenAI
from memstore.derive import api
from memstore.derive.events import L1Extracted, PersonaUpdated, RunFailed, ScenesUpdated
from memstore.derive.queries import l1_cursor
from memstore.derive.scenes.build import cursor_of
from memstore.errors import LLMError
from memstore.llm import LLMClient
from memstore.store import Store
from tests.derive_support import ScriptedLLM, open_store, say

WRONG_FIELDS = '{"memories": [{"fact": "The user\'s name is Alice.", "kind": "persona"}]}'


@pytest.fixture
def llm() -> Iterator[tuple[FakeOpenAI, ScriptedLLM]]:
    script = ScriptedLLM()
    with FakeOpenAI(chat=script) as fake:
        yield fake, script


def _store(tmp_path: Path, settings: Settings, fake: FakeOpenAI, **kw: Any) -> Store:
    values: dict[str, Any] = {
        "llm_base_url": fake.base_url,
        "llm_model": "fake-model",
        "llm_max_retries": 1,
        "llm_timeout_s": 5.0,
        **kw,
    }
    return open_store(tmp_path / "m.db", settings.replace(**values))


@pytest.fixture
def lstore(
    tmp_path: Path, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> Iterator[Store]:
    store = _store(tmp_path, settings, llm[0])
    try:
        yield store
    finally:
        store.close()


def _cursor(store: Store) -> int:
    with store._db.read() as conn:
        return l1_cursor(conn, "alice", "s1", 0)


def _failures(store: Store) -> list[Any]:
    return [e.payload for e in store.read_events(types=[RunFailed.TYPE])]


def test_wrong_item_fields_fail_the_run_and_keep_the_messages(
    lstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    _, script = llm
    script.override["extract"] = WRONG_FIELDS
    say(lstore, "alice", "s1", "Hi, my name is Alice.")
    out = api.run_l1(lstore._derivation, "alice", "s1")
    assert not out.ok and "LLMOutputError" in (out.error or "")
    assert "no text 'content'" in (out.error or "") and '"fact"' in (out.error or "")
    assert script.calls == ["extract", "extract"]  # one corrective retry, then fail
    assert _cursor(lstore) == 0 and lstore.read_events(types=[L1Extracted.TYPE]) == []
    assert [f.stage for f in _failures(lstore)] == ["l1"]

    del script.override["extract"]  # the model behaves again: nothing was lost
    assert api.run_l1(lstore._derivation, "alice", "s1").ok
    assert [m["content"] for m in api.list_memories(lstore._derivation, "alice")] == [
        "The user's name is Alice."
    ]
    assert _cursor(lstore) > 0


def test_wrong_item_fields_then_a_corrected_answer(
    lstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    _, script = llm
    answers = iter([WRONG_FIELDS])

    def first_wrong(user: str) -> str:
        import json

        return next(answers, None) or json.dumps(script.extract(user))

    script.override["extract"] = first_wrong
    say(lstore, "alice", "s1", "Hi, my name is Alice.")
    assert api.run_l1(lstore._derivation, "alice", "s1").ok
    assert [m["content"] for m in api.list_memories(lstore._derivation, "alice")] == [
        "The user's name is Alice."
    ]
    assert script.calls == ["extract", "extract"]


def test_scene_ops_with_wrong_fields_fail_without_moving_the_scene_cursor(
    lstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    _, script = llm
    say(lstore, "alice", "s1", "Hi, my name is Alice.")
    assert api.run_l1(lstore._derivation, "alice", "s1").ok
    script.override["scenes"] = (
        '{"operations": [{"operation": "create", "title": "About Alice", "text": "- Alice"}]}'
    )
    out = api.run_l2(lstore._derivation, "alice")
    assert not out.ok and "'op'" in (out.error or "")
    with lstore._db.read() as conn:
        assert cursor_of(conn, "alice", 0) == 0
    assert lstore.read_events(types=[ScenesUpdated.TYPE]) == []
    del script.override["scenes"]
    assert api.run_l2(lstore._derivation, "alice").ok
    assert [s["name"] for s in api.list_scenes(lstore._derivation, "alice")] == ["About Alice"]


def test_persona_with_wrong_fields_fails_and_keeps_the_old_one(
    lstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    _, script = llm
    say(lstore, "alice", "s1", "Hi, my name is Alice.")
    assert api.run_l1(lstore._derivation, "alice", "s1").ok
    script.override["persona"] = '{"profile": "# Profile\\nAlice."}'
    out = api.run_l3(lstore._derivation, "alice")
    assert not out.ok and "'persona' is missing" in (out.error or "")
    assert lstore.read_events(types=[PersonaUpdated.TYPE]) == []
    assert api.get_persona(lstore._derivation, "alice") in (None, "")


@pytest.mark.parametrize("fault", ["truncated", "disconnect"])
def test_a_broken_body_is_retried(
    lstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM], fault: str
) -> None:
    fake, script = llm
    fake.fault_next(fault)
    say(lstore, "alice", "s1", "Hi, my name is Alice.")
    assert api.run_l1(lstore._derivation, "alice", "s1").ok
    assert script.calls == ["extract", "extract"]  # the broken answer, then the retry
    assert [m["content"] for m in api.list_memories(lstore._derivation, "alice")] == [
        "The user's name is Alice."
    ]


def test_a_body_broken_every_time_is_an_llm_error_and_a_failed_run(
    lstore: Store, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, script = llm
    fake.fault_next("truncated", n=10)
    say(lstore, "alice", "s1", "Hi, my name is Alice.")
    out = api.run_l1(lstore._derivation, "alice", "s1")  # no raw JSONDecodeError escapes
    assert not out.ok and out.error is not None
    assert out.error.startswith("LLMError") and "not complete JSON" in out.error
    assert len(script.calls) == 2  # llm_max_retries=1: two tries
    assert _cursor(lstore) == 0 and len(_failures(lstore)) == 1


def test_an_answer_past_the_cap_is_refused(
    tmp_path: Path, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, _ = llm
    with _store(tmp_path, settings, fake, llm_max_answer_bytes=100_000) as store:
        say(store, "alice", "s1", "Hi, my name is Alice.")
        fake.fault_next("huge", size=1_000_000)
        out = api.run_l1(store._derivation, "alice", "s1")
        assert not out.ok and "more than llm_max_answer_bytes (100,000)" in (out.error or "")
        assert _cursor(store) == 0
        assert api.run_l1(store._derivation, "alice", "s1").ok  # an ordinary answer still fits


def test_an_undeclared_huge_answer_stops_being_read_at_the_cap(fake_server: FakeOpenAI) -> None:
    size = 64 * 1024 * 1024
    fake_server.fault_next("huge_chunked", size=size)
    settings = Settings().replace(
        llm_base_url=fake_server.base_url,
        llm_model="m",
        llm_max_retries=0,
        llm_max_answer_bytes=1_000_000,
    )
    with LLMClient(settings) as client, pytest.raises(LLMError) as info:
        client.complete_json(kind="test", system="s", user="u", validate=dict)
    assert "reading stopped there" in str(info.value)
    # The client hung up: the server could not push the whole 64 MB.
    assert fake_server.bytes_sent < size // 2


@pytest.fixture
def fake_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(chat=lambda _req: "{}") as fake:
        yield fake
