"""Memories and scenes are frozen records with one id; the dict access of
earlier versions still works, with a DeprecationWarning."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore import Memory, Scene, Settings, Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(tmp_path / "m.db", settings=s) as st:
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
