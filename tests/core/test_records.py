"""Memories and scenes are frozen records with one id; the dict access of
earlier versions still works, with a DeprecationWarning."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest

from memstore import Memory, Message, Scene, Settings, Store

pytestmark = pytest.mark.both_backends


@pytest.fixture
def store(target: str) -> Iterator[Store]:
    s = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(target, settings=s) as st:
        st.capture_turn("u", "s", "My name is Alice. I live in Berlin.", "Nice!")
        st.run_pipeline("u")
        yield st


def test_records_are_typed_and_frozen(store: Store) -> None:
    m = store.list_memories("u")[0]
    assert isinstance(m, Memory) and isinstance(m.memory_id, str) and m.status == "active"
    assert isinstance(m.source_message_ids, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.content = "changed"  # type: ignore[misc]
    assert not hasattr(m, "id")  # one id: memory_id
    assert store.get_memory("u", m.memory_id) == m
    scene = store.list_scenes("u")[0]
    assert isinstance(scene, Scene) and scene.scene_id and isinstance(scene.memory_ids, tuple)
    assert json.loads(json.dumps(m.to_dict()))["memory_id"] == m.memory_id


def test_dict_access_still_works_with_a_warning(store: Store) -> None:
    m = store.list_memories("u")[0]
    warned = r"Memory\['content'\] is deprecated.*use \.content"
    with pytest.warns(DeprecationWarning, match=warned):
        assert m["content"] == m.content
    with pytest.warns(DeprecationWarning, match=r"use \.memory_id"):
        row_id = m["id"]
    assert isinstance(row_id, int) and row_id > 0
    with pytest.warns(DeprecationWarning):
        assert m["source_message_ids"] == list(m.source_message_ids)
    with pytest.warns(DeprecationWarning), pytest.raises(KeyError):
        m["nonexistent"]
    assert "memory_id" in m and "id" in m and "nonexistent" not in m
    with pytest.warns(DeprecationWarning):
        as_dict = dict(m)  # the old dicts' keys, "id" included
    assert as_dict["memory_id"] == m.memory_id and as_dict["id"] == row_id
    scene = store.list_scenes("u")[0]
    assert "created_at" not in scene  # list_scenes never had it
    with pytest.warns(DeprecationWarning):
        assert scene["name"] == scene.name
    one = store.get_scene("u", scene.name)
    assert one is not None and "created_at" in one


def test_stored_messages_are_frozen_records(store: Store) -> None:
    msgs = store.session_messages("u", "s")
    assert [m.role for m in msgs] == ["user", "assistant"]
    first = msgs[0]
    assert isinstance(first, Message) and first.session_id == "s" and "Berlin" in first.text
    assert isinstance(first.message_id, str) and first.message_id
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.text = "changed"  # type: ignore[misc]
    # The memories extraction made from the message, by their one id.
    made = {store.get_memory("u", i).content for i in first.memory_ids or ()}
    assert any("Berlin" in c for c in made)
    memory = next(m for m in store.list_memories("u") if "Berlin" in m.content)
    [source] = store.memory_sources("u", memory.memory_id)
    assert isinstance(source, Message) and source.message_id == first.message_id
    assert source.memory_ids is None  # only session_messages says what was made
    assert json.loads(json.dumps(first.to_dict()))["message_id"] == first.message_id


def test_message_dict_access_still_works_with_a_warning(store: Store) -> None:
    first, second = store.session_messages("u", "s")
    with pytest.warns(DeprecationWarning, match=r"Message\['text'\] is deprecated.*use \.text"):
        assert first["text"] == first.text
    with pytest.warns(DeprecationWarning):
        assert first["memory_ids"] == list(first.memory_ids or ())
    with pytest.warns(DeprecationWarning):
        assert second["memory_ids"] == []  # the earlier dicts had an empty list
    memory = next(m for m in store.list_memories("u") if "Berlin" in m.content)
    [source] = store.memory_sources("u", memory.memory_id)
    assert "memory_ids" not in source  # memory_sources never had it
    with pytest.warns(DeprecationWarning):
        assert dict(source)["session_id"] == "s"
