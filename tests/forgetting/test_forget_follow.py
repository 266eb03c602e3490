"""A retired memory takes its text out of every scene and persona built from
it, at once, whichever way it was forgotten; with an LLM deriver the stale
text is never served while the LLM's re-derivation is queued or failing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from memstore import Settings
from memstore.derive import api
from memstore.derive.events import PersonaUpdated, RunFailed
from memstore.pipeline import queue
from memstore.porting.export import export_markdown
from memstore.store import Store
from provider import tools
from tests.backends import Targets
from tests.derive_support import ScriptedLLM, open_store, say, snapshot
from tests.fakeopenai import FakeOpenAI

pytestmark = pytest.mark.both_backends


def _porto(store: Store) -> str:
    [m] = [m for m in store.list_memories("alice") if "Porto" in m["content"]]
    return str(m["memory_id"])


def _served(store: Store) -> str:
    """What every read path shows of alice's derived layers."""
    r = store.recall("alice", "where do I live?")
    scenes = store.list_scenes("alice")
    answers = [
        tools.handle(store, tools.SCENE_READ, {"name": s["name"]}, user_id="alice",
                     session_id="x", read_only=True)
        for s in scenes
    ]  # fmt: skip
    answers.append(
        tools.handle(store, tools.MEMORY_SEARCH, {"query": "where does the user live"},
                     user_id="alice", session_id="x", read_only=True)
    )  # fmt: skip
    return "\n".join(
        [r.stable, r.per_turn, r.navigation, store.get_persona("alice") or "",
         export_markdown(store, ["alice"]), *answers,
         *(f"{s['name']} {s['summary']} {s['body']}" for s in scenes)]
    )  # fmt: skip


def _by_api(store: Store, mid: str) -> None:
    store.forget_memory("alice", mid)


def _by_host_remove(store: Store, _mid: str) -> None:
    assert store.write_memory("alice", "remove", "The user lives in Porto.", origin="host")


def _by_tool(store: Store, mid: str) -> None:
    out = json.loads(
        tools.handle(store, tools.MEMORY_FORGET, {"memory_id": mid}, user_id="alice",
                     session_id="x", read_only=False)
    )  # fmt: skip
    assert "error" not in out, out


@pytest.fixture
def rstore(new_target: Targets, settings: Settings) -> Iterator[Store]:
    store = open_store(new_target("r.db"), settings)
    try:
        store.capture_turn("alice", "s1", "I live in Porto and I am allergic to peanuts.", "Noted.")
        store.end_session("alice", "s1")
        store.run_pipeline("alice")
        yield store
    finally:
        store.close()


@pytest.mark.parametrize("forget", [_by_api, _by_host_remove, _by_tool])
def test_rule_scenes_and_persona_follow_the_forget_at_once(
    rstore: Store, forget: Callable[[Store, str], None]
) -> None:
    before = _served(rstore)
    assert "Porto" in before and "peanuts" in before
    mid = _porto(rstore)
    forget(rstore, mid)
    after = _served(rstore)
    assert "Porto" not in after  # persona, scene text, navigation, export, tools
    assert "peanuts" in after  # what else was known stays
    assert "peanuts" in (rstore.get_persona("alice") or "")
    # Nothing the pipeline runs later brings it back.
    rstore.run_pipeline("alice")
    assert "Porto" not in _served(rstore)
    # The history keeps the forget; the projections follow from the log.
    assert [h["action"] for h in rstore.memory_history("alice", mid)][-1] == "forget"
    state = snapshot(rstore)
    rstore.rebuild()
    assert snapshot(rstore) == state


def test_scenes_and_persona_record_what_they_were_built_from(rstore: Store) -> None:
    mems = {m["memory_id"] for m in rstore.list_memories("alice")}
    for s in rstore.list_scenes("alice"):
        assert set(s["source_memory_ids"]) == set(s["memory_ids"]) <= mems
    [ev] = rstore.read_events(types=[PersonaUpdated.TYPE])
    assert isinstance(ev.payload, PersonaUpdated) and set(ev.payload.memory_ids or []) == mems
    # A scene no forgotten memory went into is left alone.
    peanuts = next(s for s in rstore.list_scenes("alice") if "peanuts" in s["body"])
    rstore.forget_memory("alice", _porto(rstore))
    assert next(s for s in rstore.list_scenes("alice") if s["scene_id"] == peanuts["scene_id"]) == (
        peanuts
    )


@pytest.fixture
def llm() -> Iterator[tuple[FakeOpenAI, ScriptedLLM]]:
    script = ScriptedLLM()
    with FakeOpenAI(chat=script) as fake:
        yield fake, script


def test_llm_stale_text_is_never_served_while_the_rederivation_waits_or_fails(
    new_target: Targets, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, script = llm
    s = settings.replace(
        llm_base_url=fake.base_url, llm_model="fake-model", llm_max_retries=1, llm_timeout_s=5.0
    )
    store = open_store(new_target("l.db"), s)
    try:
        say(store, "alice", "s1", "Hi, my name is Alice.", "I live in Berlin and I'm vegetarian.")
        assert api.run_l1(store._derivation, "alice", "s1").ok
        assert api.run_l2(store._derivation, "alice").ok
        assert api.run_l3(store._derivation, "alice").ok
        assert "Berlin" in (store.get_persona("alice") or "")
        assert any("Berlin" in sc["body"] for sc in store.list_scenes("alice"))
        berlin = next(m for m in store.list_memories("alice") if "Berlin" in m["content"])

        script.override["persona"] = "this is not {json"  # the LLM's persona run fails
        store.forget_memory("alice", berlin["memory_id"])
        # Queued for the LLM at once ...
        with store._db.read() as conn:
            assert "l3" in [i.stage for i in queue.pending(conn, "alice")]
        # ... and meanwhile a rule-built stand-in is served, without Berlin.
        assert "Berlin" not in _served(store)
        assert "Alice" in (store.get_persona("alice") or "")
        store.run_pipeline("alice")  # the LLM run fails
        failed = store.read_events(types=[RunFailed.TYPE])
        assert [e.payload.stage for e in failed] == ["l3"]  # type: ignore[attr-defined]
        assert "Berlin" not in _served(store)
        persona = store.read_events(types=[PersonaUpdated.TYPE])[-1].payload
        assert isinstance(persona, PersonaUpdated) and persona.deriver == "rules"

        del script.override["persona"]
        with store._db.write() as conn:  # the retry, due now
            queue.enqueue(conn, "alice", "l3", now=store._clock())
        store.run_pipeline("alice")
        persona = store.read_events(types=[PersonaUpdated.TYPE])[-1].payload
        assert isinstance(persona, PersonaUpdated) and persona.deriver == "llm"
        assert "Berlin" not in _served(store)
        assert "Alice" in (store.get_persona("alice") or "")
    finally:
        store.close()


def test_llm_erasure_rebuilds_by_rules_and_queues_the_llm(
    new_target: Targets, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, script = llm
    s = settings.replace(
        llm_base_url=fake.base_url, llm_model="fake-model", llm_max_retries=1, llm_timeout_s=5.0
    )
    store = open_store(new_target("e.db"), s)
    try:
        say(store, "alice", "s1", "Hi, my name is Alice.")
        say(store, "alice", "s2", "I live in Berlin and I'm vegetarian.")
        for sid in ("s1", "s2"):
            assert api.run_l1(store._derivation, "alice", sid).ok
        assert api.run_l2(store._derivation, "alice").ok
        assert api.run_l3(store._derivation, "alice").ok
        assert "Berlin" in _served(store)
        script.override["persona"] = "this is not {json"
        report = store.forget_session("alice", "s2")
        assert report.compacted and report.memories_removed == 2
        with store._db.read() as conn:
            assert "l3" in [i.stage for i in queue.pending(conn, "alice")]
        assert "Berlin" not in _served(store) and "vegetarian" not in _served(store)
        assert "Alice" in (store.get_persona("alice") or "")
        store.run_pipeline("alice")  # the LLM persona run fails: the stand-in stays
        assert "Berlin" not in _served(store)
        assert [e.payload.stage for e in store.read_events(types=[RunFailed.TYPE])] == ["l3"]  # type: ignore[attr-defined]
    finally:
        store.close()


def test_a_persona_of_unknown_sources_is_rewritten_by_any_forget(rstore: Store) -> None:
    from memstore.derive.events import derive_stream
    from memstore.events.log import NewEvent

    # As written before personas recorded their sources (no memory_ids field).
    old = PersonaUpdated("r0", 0, "llm", "m", "v", "# Old\n- lives in Porto", "manual")
    assert old.memory_ids is None
    assert (
        PersonaUpdated.from_dict({k: v for k, v in old.to_dict().items() if k != "memory_ids"})
        == old
    )
    rstore.append([NewEvent(derive_stream("alice"), old, user_id="alice")])
    assert "Porto" in (rstore.get_persona("alice") or "")
    [peanuts] = [m for m in rstore.list_memories("alice") if "peanuts" in m["content"]]
    rstore.forget_memory("alice", peanuts["memory_id"])
    persona = rstore.get_persona("alice") or ""
    assert "# Old" not in persona and "peanuts" not in persona and "Porto" in persona


def test_a_derivation_that_ran_across_an_erasure_is_discarded(rstore: Store) -> None:
    from memstore.derive.runs import append_checked

    since = rstore._kernel.head()  # a run starts, reads the messages ...
    rstore.forget_session("alice", "s1")  # ... the user erases them meanwhile
    stale = PersonaUpdated("r1", 0, "llm", "m", "v", "- lives in Porto", "manual", memory_ids=[])
    assert append_checked(rstore._derivation, "alice", [stale], since=since) is None
    assert "Porto" not in (rstore.get_persona("alice") or "")
