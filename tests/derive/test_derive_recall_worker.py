"""The recall search worker: any failure comes back at once, and a hung
search cannot pile up threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from memstore import Settings
from memstore import recall as recall_api
from memstore.recall import compose as recall
from memstore.store import Store
from tests.backends import Targets
from tests.derive_support import open_store, say

pytestmark = pytest.mark.both_backends


@pytest.fixture
def rstore(new_target: Targets, settings: Settings) -> Iterator[Store]:
    store = open_store(new_target("r.db"), settings)
    try:
        say(store, "u", "s", "My name is Alice.", "I love hiking in the Alps.")
        store.run_pipeline("u")
        yield store
    finally:
        store.close()


def test_an_unexpected_search_error_answers_without_memories_at_once(
    rstore: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a bug in the embedder")

    monkeypatch.setattr(rstore._derivation, "search_both", broken)
    r = recall_api.recall(rstore._derivation, "hiking", user_id="u", timeout_s=20)
    assert not r.timed_out  # the error came back; the caller did not wait out the deadline
    assert r.memories == [] and "<user-persona>" in r.text
    assert any("ZeroDivisionError" in rec.getMessage() for rec in caplog.records)


def _recall_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("memstore-recall"))


def test_hung_searches_do_not_pile_up_threads(
    rstore: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    def hung(*args: Any, **kwargs: Any) -> Any:
        release.wait(timeout=60)
        return [], []

    monkeypatch.setattr(rstore._derivation, "search_both", hung)
    before = _recall_threads()
    try:
        for _ in range(getattr(recall, "MAX_RECALL_WORKERS", 4) * 3):
            r = recall_api.recall(rstore._derivation, "hiking", user_id="u", timeout_s=0)
            assert r.timed_out and "<user-persona>" in r.text
        assert _recall_threads() - before <= getattr(recall, "MAX_RECALL_WORKERS", 4)
    finally:
        release.set()
