"""The records ``Store`` returns match the types it declares, key for key.

TypedDicts are not checked at run time, so a column added to a projection
table (or a key dropped from a report) would make the declared type a lie
without any error; these tests read real results from a real store and
compare their keys with the TypedDicts' required and optional keys.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

import memstore
from memstore import records
from memstore.config import Settings
from memstore.store import Store
from tests.backends import Targets

pytestmark = pytest.mark.both_backends


def _check(value: Mapping[str, Any], td: Any) -> None:
    keys = set(value)
    required = set(td.__required_keys__)
    allowed = required | set(td.__optional_keys__)
    assert required <= keys, f"{td.__name__}: missing {sorted(required - keys)}"
    assert keys <= allowed, f"{td.__name__}: undeclared {sorted(keys - allowed)}"


@pytest.fixture
def store(new_target: Targets) -> Iterator[Store]:
    s = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(new_target("m.db"), settings=s) as st:
        st.capture_turn("u", "s", "My name is Alice. I love hiking in the Alps.", "Nice!")
        st.capture_turn("u", "s", "I live in Berlin. Please keep answers short.", "OK")
        st.run_pipeline("u")
        yield st


def test_memories_scenes_and_history(store: Store) -> None:
    from memstore.derive import api

    rows = api.list_memories(store._derivation, "u")
    assert rows
    for row in rows:
        _check(row, records.MemoryRow)
    mems = store.list_memories("u")
    assert [m.memory_id for m in mems] == [r["memory_id"] for r in rows]
    # The record carries every column but the row number (one id: memory_id).
    assert set(records.MemoryRow.__required_keys__) - set(mems[0].to_dict()) == {"id"}
    for entry in store.memory_history("u", mems[0].memory_id):
        _check(entry, records.MemoryChange)
    scene_rows = api.list_scenes(store._derivation, "u")
    assert scene_rows
    for sc in scene_rows:
        _check(sc, records.SceneRow)
    scenes = store.list_scenes("u")
    assert set(records.SceneRow.__required_keys__) <= set(scenes[0].to_dict())
    one = store.get_scene("u", scenes[0].name)
    assert one is not None and one.created_at is not None and one.updated_at is not None


def test_pipeline_reports(store: Store) -> None:
    store.capture_turn("u", "s2", "I started learning the cello.", "Great.")
    [status] = store.pipeline_status("u")
    _check(status, records.PipelineStatus)
    assert status["sessions"]
    for sess in status["sessions"]:
        _check(sess, records.SessionStatus)
    report = store.end_session("u", "s2", timeout_s=30)
    _check(report, records.EndSessionReport)
    assert report["ran"]
    for run in report["ran"]:
        _check(run, records.StageRun)


def test_embedding_status_and_info(store: Store, new_target: Targets) -> None:
    status = store.embedding_status()
    _check(status, records.EmbeddingStatus)
    _check(status["l0"], records.VectorSpaceStatus)
    _check(store.info(), records.StoreInfo)
    with Store.open(new_target("none.db"), settings=Settings().replace(embedder="none")) as bare:
        _check(bare.embedding_status(), records.EmbeddingStatus)


def test_public_names_import_from_memstore() -> None:
    for name in memstore.__all__:
        assert getattr(memstore, name) is not None
    for name in ("Recall", "RecalledMemory", "RecalledMessage", "Hit", "ErasureReport"):
        assert name in memstore.__all__
    hints = typing.get_type_hints(Store.forget_user)
    assert hints["return"] is memstore.ErasureReport
