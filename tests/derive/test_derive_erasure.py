"""Erasure while a derivation run is in flight: the run must not bring the
erased content back (the run's LLM call started before the erasure and its
outcome arrives after it)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import inspect, text

from memstore import Settings
from memstore.derive import api
from memstore.derive.memories import extract as l1
from memstore.derive.persona import rules as persona_rules
from memstore.derive.scenes import rules as scene_rules
from memstore.errors import NotFoundError
from memstore.store import Store
from tests.backends import Targets
from tests.derive_support import open_store, say

pytestmark = pytest.mark.both_backends

USER = "dana"


@pytest.fixture
def estore(new_target: Targets, settings: Settings) -> Iterator[Store]:
    store = open_store(new_target("e.db"), settings)
    try:
        say(store, USER, "s", "My name is Dana.", "I am allergic to peanuts.")
        say(store, "other", "s", "My name is Olga.")
        yield store
    finally:
        store.close()


def _erase_during(store: Store, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, but the user is erased while it runs (as another thread would)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        # Later calls (for other users) find USER erased: forgetting an
        # unknown user is an error now.
        with contextlib.suppress(NotFoundError):
            store.forget_user(USER)
        return out

    return wrapped


def _nothing_of_the_user_left(store: Store) -> None:
    assert store.read_events(user_id=USER) == []
    assert api.list_memories(store._derivation, USER) == []
    assert api.list_scenes(store._derivation, USER) == []
    assert api.get_persona(store._derivation, USER) is None
    with store._db.read() as conn:
        for table in ("l1_memories", "l1_cursors", "l2_scenes", "l3_persona", "derive_failures"):
            n = conn.execute(
                text(f"SELECT count(*) FROM {table} WHERE user_id = :u"), {"u": USER}
            ).scalar_one()
            assert n == 0, table
        for table in inspect(conn).get_table_names():
            if table.startswith(("vec_", "sqlite_")):
                continue
            rows = conn.execute(text(f'SELECT * FROM "{table}"')).all()
            assert "peanut" not in repr(rows).lower(), table


def test_l1_run_in_flight_during_erasure_appends_nothing(
    estore: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(l1, "_extract", _erase_during(estore, l1._extract))
    out = estore.run_pipeline(USER)
    assert all(o.events_appended == 0 for o in out)
    _nothing_of_the_user_left(estore)
    # other users are untouched and keep working
    estore.run_pipeline("other")
    assert [m["content"] for m in api.list_memories(estore._derivation, "other")] == [
        "The user's name is Olga."
    ]


def test_l2_run_in_flight_during_erasure_appends_nothing(
    estore: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.run_l1(estore._derivation, USER, "s")
    monkeypatch.setattr(scene_rules, "scene_ops", _erase_during(estore, scene_rules.scene_ops))
    out = api.run_l2(estore._derivation, USER)
    assert out.events_appended == 0
    _nothing_of_the_user_left(estore)


def test_l3_run_in_flight_during_erasure_appends_nothing(
    estore: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.run_l1(estore._derivation, USER, "s")
    api.run_l2(estore._derivation, USER)
    monkeypatch.setattr(
        persona_rules, "persona_text", _erase_during(estore, persona_rules.persona_text)
    )
    out = api.run_l3(estore._derivation, USER)
    assert out.events_appended == 0
    _nothing_of_the_user_left(estore)


def test_a_user_recreated_after_erasure_is_derived_normally(estore: Store) -> None:
    estore.forget_user(USER)
    say(estore, USER, "s2", "My name is Dana.")
    estore.run_pipeline(USER)
    assert [m["content"] for m in api.list_memories(estore._derivation, USER)] == [
        "The user's name is Dana."
    ]
