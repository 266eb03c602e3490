"""Forgetting a memory survives a re-derive; memory history is per user."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from memstore import Settings
from memstore.cli import cli
from memstore.cli import derive as _derive_cli  # noqa: F401  registers the commands
from memstore.derive import api
from memstore.derive.events import L1Extracted
from memstore.errors import NotFoundError
from memstore.store import Store
from tests.backends import Targets
from tests.derive_support import open_store, say

pytestmark = pytest.mark.both_backends


@pytest.fixture
def fstore(new_target: Targets, settings: Settings) -> Iterator[Store]:
    store = open_store(new_target("f.db"), settings)
    try:
        say(store, "u", "s", "My name is Dana and I love hiking. I am allergic to peanuts.")
        store.run_pipeline("u")
        yield store
    finally:
        store.close()


def _contents(store: Store) -> list[str]:
    return sorted(m["content"] for m in api.list_memories(store._derivation, "u"))


def _forget(store: Store, needle: str) -> str:
    [m] = [m for m in api.list_memories(store._derivation, "u") if needle in m["content"]]
    api.forget_memory(store._derivation, "u", m["memory_id"])
    return str(m["memory_id"])


@pytest.mark.parametrize("from_layer", ["l1", "l2"])
def test_rederive_does_not_bring_back_a_forgotten_memory(fstore: Store, from_layer: str) -> None:
    forgotten = _forget(fstore, "peanuts")
    assert _contents(fstore) == ["The user likes hiking.", "The user's name is Dana."]
    gen = api.rederive(fstore._derivation, "u", from_layer=from_layer)
    assert _contents(fstore) == ["The user likes hiking.", "The user's name is Dana."]
    if from_layer == "l1":
        ev = [
            e.payload
            for e in fstore.read_events(user_id="u", types=[L1Extracted.TYPE])
            if isinstance(e.payload, L1Extracted) and e.payload.generation == gen
        ]
        skipped = [d for p in ev for d in p.decisions if d["reason"] == "forgotten"]
        assert len(skipped) == 1
        assert skipped[0]["action"] == "skip"
        assert skipped[0]["candidate"] == "The user is allergic to peanuts."
        assert skipped[0]["target_ids"] == [forgotten]


def test_a_forget_survives_two_rederives_and_a_rollback(fstore: Store) -> None:
    _forget(fstore, "peanuts")
    api.rederive(fstore._derivation, "u")
    api.rederive(fstore._derivation, "u")
    assert "The user is allergic to peanuts." not in _contents(fstore)
    api.activate_generation(fstore._derivation, "u", 0)
    assert "The user is allergic to peanuts." not in _contents(fstore)


def test_rules_rederive_skips_the_same_subject_from_older_messages(fstore: Store) -> None:
    say(fstore, "u", "s", "My name is Dana Scully.")
    fstore.run_pipeline("u")
    assert "The user's name is Dana Scully." in _contents(fstore)
    _forget(fstore, "name is")  # the user wants no name kept
    api.rederive(fstore._derivation, "u")
    assert not [c for c in _contents(fstore) if "name is" in c]


def test_a_statement_made_after_the_forget_is_derived_again(fstore: Store) -> None:
    _forget(fstore, "peanuts")
    say(fstore, "u", "s", "I am allergic to peanuts.")  # said again, after the forget
    fstore.run_pipeline("u")
    assert "The user is allergic to peanuts." in _contents(fstore)
    api.rederive(fstore._derivation, "u")
    assert "The user is allergic to peanuts." in _contents(fstore)


def test_memory_history_is_scoped_to_the_user(fstore: Store) -> None:
    mid = _forget(fstore, "peanuts")
    hist = api.memory_history(fstore._derivation, "u", mid)
    assert hist[0]["action"] == "store" and hist[-1]["action"] == "forget"
    with pytest.raises(NotFoundError):
        api.memory_history(fstore._derivation, "someone-else", mid)


def test_cli_history_takes_the_user(fstore: Store, new_target: Targets) -> None:
    mid = _forget(fstore, "peanuts")
    db = new_target("f.db")  # fstore's file or database
    runner = CliRunner()
    ok = runner.invoke(cli, ["memories", "history", "--db", db, "--user", "u", mid])
    assert ok.exit_code == 0, ok.output
    assert "forget" in ok.output
    other = runner.invoke(cli, ["memories", "history", "--db", db, "--user", "eve", mid])
    assert other.exit_code != 0
    assert "peanuts" not in other.output
