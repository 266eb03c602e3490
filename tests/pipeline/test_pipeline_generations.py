"""Pipeline state follows the user's ACTIVE derivation generation only: a
re-derive that never becomes active must not take the live pipeline's
pending messages, and activating a generation switches the session cursors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memstore import Settings
from memstore.bench.snapshot import snapshot
from memstore.derive import api, generations
from memstore.derive.runs import RunOutcome
from memstore.errors import PipelineError
from memstore.pipeline.state import get_session
from memstore.store import Store
from tests.backends import Targets
from tests.derive_support import open_store, say

pytestmark = pytest.mark.both_backends


@pytest.fixture
def gstore(new_target: Targets, settings: Settings) -> Iterator[Store]:
    store = open_store(new_target("g.db"), settings)
    try:
        yield store
    finally:
        store.close()


def _pending(store: Store, user: str = "u", session: str = "s") -> int:
    with store._db.read() as conn:
        st = get_session(conn, user, session)
    assert st is not None
    return st.messages_pending


def _contents(store: Store) -> list[str]:
    return sorted(m["content"] for m in api.list_memories(store._derivation, "u"))


def _rebuild_matches(store: Store) -> None:
    before = snapshot(store)
    store.rebuild()
    assert snapshot(store) == before


def test_a_failed_rederive_keeps_the_live_pipelines_pending_messages(
    gstore: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    say(gstore, "u", "s", "My name is Dana.", "I love hiking.")
    assert _pending(gstore) == 2

    def broken_l2(store: Store, user: str, gen: int) -> RunOutcome:
        return RunOutcome("l2", False, "r", error="LLM 500")

    monkeypatch.setattr(generations, "run_l2_generation", broken_l2)
    with pytest.raises(PipelineError):
        api.rederive(gstore._derivation, "u")
    assert _pending(gstore) == 2  # the half-built generation took nothing
    monkeypatch.undo()

    gstore.run_pipeline("u")
    assert _pending(gstore) == 0
    assert _contents(gstore) == ["The user likes hiking.", "The user's name is Dana."]
    _rebuild_matches(gstore)


def test_activation_switches_session_cursors_and_recomputes_pending(gstore: Store) -> None:
    say(gstore, "u", "s", "My name is Dana.")
    gstore.run_pipeline("u")
    assert _pending(gstore) == 0
    new = api.rederive(gstore._derivation, "u")
    assert _pending(gstore) == 0  # the new generation covered the same messages

    say(gstore, "u", "s", "I love hiking.")
    gstore.run_pipeline("u")  # extracted into the new (active) generation only
    assert _pending(gstore) == 0
    assert _contents(gstore) == ["The user likes hiking.", "The user's name is Dana."]

    # Roll back: generation 0 never saw the hiking message, so it is pending again.
    api.activate_generation(gstore._derivation, "u", 0)
    assert _pending(gstore) == 1
    assert _contents(gstore) == ["The user's name is Dana."]
    _rebuild_matches(gstore)
    gstore.run_pipeline("u")
    assert _pending(gstore) == 0
    assert _contents(gstore) == ["The user likes hiking.", "The user's name is Dana."]

    # And forward again: the new generation is complete, nothing is pending.
    api.activate_generation(gstore._derivation, "u", new)
    assert _pending(gstore) == 0
    _rebuild_matches(gstore)


def test_rederive_from_l2_keeps_the_l1_cursors(gstore: Store) -> None:
    say(gstore, "u", "s", "My name is Dana.")
    gstore.run_pipeline("u")
    api.rederive(gstore._derivation, "u", from_layer="l2")
    assert _pending(gstore) == 0
    with gstore._db.read() as conn:
        st = get_session(conn, "u", "s")
    assert st is not None and st.extractions == 1
    _rebuild_matches(gstore)
