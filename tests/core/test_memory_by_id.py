"""A memory by its id: get it, update its text, forget it; the fixed choices are
``Literal`` types."""

from __future__ import annotations

import typing

import pytest

from memstore import Store
from memstore.errors import InvalidInputError, NotFoundError
from memstore.records import Layer, MemoryAction, MemoryType, SearchStrategy
from tests.backends import Targets

pytestmark = pytest.mark.both_backends


@pytest.fixture
def store(new_target: Targets) -> typing.Iterator[Store]:
    with Store.open(new_target("m.db")) as s:
        s.capture_turn("alice", "s1", "I'm vegetarian and I live in Porto", "Noted")
        s.end_session("alice", "s1")
        yield s


def test_get_and_update_a_memory_by_id(store: Store) -> None:
    first = store.list_memories("alice")[0]
    memory_id = first.memory_id
    got = store.get_memory("alice", memory_id)
    assert got.memory_id == memory_id and got.content == first.content

    assert store.update_memory("alice", memory_id, "The user lives in Lisbon.") == memory_id
    live = {m.memory_id: m for m in store.list_memories("alice")}
    assert live[memory_id].content == "The user lives in Lisbon."
    assert live[memory_id].type == first.type
    assert store.get_memory("alice", memory_id).content == "The user lives in Lisbon."
    history = store.memory_history("alice", memory_id)
    assert [h["action"] for h in history][-1] == "update"
    hits = store.search_memories("alice", "Lisbon", strategy="keyword")
    assert [h.text for h in hits] == ["The user lives in Lisbon."]


def test_refusals(store: Store) -> None:
    memory_id = store.list_memories("alice")[0].memory_id
    with pytest.raises(NotFoundError):
        store.get_memory("alice", "no-such-id")
    with pytest.raises(NotFoundError):
        store.get_memory("bob", memory_id)  # another user's id is not found
    with pytest.raises(InvalidInputError):
        store.update_memory("alice", memory_id, "   ")
    store.forget_memory("alice", memory_id)
    with pytest.raises(NotFoundError, match="already retired: nothing updated"):
        store.update_memory("alice", memory_id, "new text")
    assert store.get_memory("alice", memory_id).status == "retired"


def test_fixed_choices_are_literals() -> None:
    assert typing.get_args(SearchStrategy) == ("keyword", "vector", "hybrid")
    assert typing.get_args(MemoryType) == ("persona", "episodic", "instruction")
    assert typing.get_args(MemoryAction) == ("add", "replace", "remove")
    assert typing.get_args(Layer) == ("l1", "l2", "l3")
    hints = typing.get_type_hints(Store.search_conversations)
    assert hints["strategy"] == SearchStrategy
    assert typing.get_type_hints(Store.rederive)["from_layer"] == Layer
    assert typing.get_type_hints(Store.write_memory)["action"] == MemoryAction


def test_hits_name_their_id(store: Store) -> None:
    [msg] = store.search_conversations("alice", "Porto", strategy="keyword", limit=1)
    assert msg.message_id == msg.ref and msg.memory_id is None
    mem = store.search_memories("alice", "Porto", strategy="keyword", limit=1)[0]
    assert mem.memory_id == mem.ref and mem.message_id is None
    assert store.get_memory("alice", mem.memory_id).content == mem.text


def test_user_id_can_always_be_passed_by_keyword() -> None:
    import inspect

    for name, method in inspect.getmembers(Store, inspect.isfunction):
        params = inspect.signature(method).parameters
        assert not {"user", "uid", "tenant"} & set(params), name  # one name for the user
        if "user_id" in params:
            kind = params["user_id"].kind
            assert kind in (kind.POSITIONAL_OR_KEYWORD, kind.KEYWORD_ONLY), name
