"""Re-derive into a new generation, switch, roll back; replay stays identical."""

from __future__ import annotations

import pytest

from memstore import Settings
from memstore.bench.fakeopenai import FakeOpenAI
from memstore.derive import api
from memstore.store import Store
from tests.backends import Targets
from tests.derive_support import ScriptedLLM, open_store, say, snapshot

pytestmark = pytest.mark.both_backends


def _contents(store: Store, **kw: object) -> list[str]:
    return sorted(m["content"] for m in api.list_memories(store._derivation, "alice", **kw))  # type: ignore[arg-type]


def test_rederive_with_an_llm_switches_and_rolls_back(
    new_target: Targets, settings: Settings
) -> None:
    path = new_target("g.db")
    with open_store(path, settings) as store:  # offline first: the rules deriver
        say(store, "alice", "s1", "My name is Alice.", "I like running.")
        say(store, "alice", "s2", "I'm vegan now.")
        for s in ("s1", "s2"):
            api.run_l1(store._derivation, "alice", s)
        api.run_l2(store._derivation, "alice")
        api.run_l3(store._derivation, "alice")
        api.write_memory(
            store._derivation, "alice", "add", "Alice prefers short answers.", type="instruction"
        )
        offline = _contents(store)
        assert "The user likes running." in offline

    script = ScriptedLLM()
    with FakeOpenAI(chat=script) as fake:
        llm = settings.replace(
            llm_base_url=fake.base_url, llm_model="fake-model", llm_max_retries=0
        )
        with open_store(path, llm) as store:
            gen = api.rederive(store._derivation, user_id="alice")
            assert gen == 1
            now = _contents(store)
            assert "The user is vegan." in now and "The user likes running." in now
            assert "Alice prefers short answers." in now  # host-written memories carry over
            assert "The user's name is Alice." in now
            assert _contents(store, generation=0) == offline  # old generation readable
            assert api.get_persona(store._derivation, "alice", generation=1)
            assert [g["active"] for g in api.list_generations(store._derivation, "alice")] == [
                False,
                True,
            ]

            api.activate_generation(store._derivation, "alice", 0)  # rollback
            assert _contents(store) == offline
            api.activate_generation(store._derivation, "alice", 1)
            assert _contents(store) == now

            # the new generation keeps deriving from where its re-derive stopped
            say(store, "alice", "s2", "Back from Lisbon!")
            assert api.run_l1(store._derivation, "alice", "s2").new_memories == 1
            assert "The user travelled to Lisbon in May 2023." in _contents(store)
            assert "The user travelled to Lisbon in May 2023." not in _contents(store, generation=0)

            before = snapshot(store)
            fake.stop()
            store.rebuild()
            assert snapshot(store) == before


def test_rederive_from_l2_copies_memories_and_rebuilds_scenes(
    new_target: Targets, settings: Settings
) -> None:
    with open_store(new_target("g2.db"), settings) as store:
        say(store, "bob", "s", "My name is Bob.", "I love jazz.")
        api.run_l1(store._derivation, "bob", "s")
        api.run_l2(store._derivation, "bob")
        gen = api.rederive(store._derivation, user_id="bob", from_layer="l2")
        mems = api.list_memories(store._derivation, "bob")
        assert {m["memory_id"].rsplit("@", 1)[1] for m in mems} == {str(gen)}
        assert {s["name"] for s in api.list_scenes(store._derivation, "bob")} == {
            "Identity",
            "Preferences",
        }
        assert api.get_persona(store._derivation, "bob")
        gen3 = api.rederive(store._derivation, user_id="bob", from_layer="l3")
        assert len(api.list_scenes(store._derivation, "bob", generation=gen3)) == 2
        say(store, "bob", "s", "I live in Oslo.")
        assert api.run_l1(store._derivation, "bob", "s").new_memories == 1  # cursors were copied
        before = snapshot(store)
        store.rebuild()
        assert snapshot(store) == before
