"""The Store's views for hosts that show the store to a person (the
inspector, the MCP server): each reads one user's data only, checks its
arguments, and the recall preview injects exactly what recall does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memstore import Settings
from memstore.errors import InvalidIdError, InvalidInputError, NotFoundError
from memstore.recall.preview import GATED, INJECTED
from memstore.store import Store
from tests.backends import Targets

pytestmark = pytest.mark.both_backends


@pytest.fixture
def vstore(new_target: Targets, settings: Settings) -> Iterator[Store]:
    store = Store.open(new_target("v.db"), settings=settings)
    try:
        at = "2023-05-08T10:00:00Z"
        store.capture("u", "s1", [
            {"role": "user", "timestamp": at, "id": "m1",
             "content": "My name is Dana and I love hiking. I am allergic to peanuts."},
            {"role": "assistant", "content": "Noted, Dana!", "timestamp": at, "id": "m2"},
        ])  # fmt: skip
        # Hosts number messages per session: "m1" again, in another session.
        store.capture("u", "s2", [
            {"role": "user", "content": "I work as a nurse in Lisbon.", "id": "m1",
             "timestamp": "2023-06-01T09:00:00Z"},
        ])  # fmt: skip
        store.capture("other", "s1", [
            {"role": "user", "content": "I am allergic to cats.", "id": "m1", "timestamp": at},
        ])  # fmt: skip
        store.run_pipeline()
        yield store
    finally:
        store.close()


def _mem(store: Store, user: str, needle: str) -> dict[str, object]:
    [m] = [m for m in store.list_memories(user) if needle in m["content"]]
    return dict(m)


def test_get_memory_is_per_user(vstore: Store) -> None:
    m = _mem(vstore, "u", "peanuts")
    got = vstore.get_memory("u", str(m["memory_id"]))
    assert got.content == "The user is allergic to peanuts."
    with pytest.raises(NotFoundError):
        vstore.get_memory("other", str(m["memory_id"]))
    with pytest.raises(NotFoundError):
        vstore.get_memory("u", "no-such-id")
    with pytest.raises(InvalidIdError):
        vstore.get_memory("u", "")


def test_memory_sources_are_the_memorys_own_session(vstore: Store) -> None:
    peanuts = _mem(vstore, "u", "peanuts")
    [src] = vstore.memory_sources("u", str(peanuts["memory_id"]))
    assert (src["session_id"], src["message_id"]) == ("s1", "m1")
    assert "peanuts" in src["text"] and src["occurred_at"].startswith("2023-05-08")
    nurse = _mem(vstore, "u", "nurse")
    [src2] = vstore.memory_sources("u", str(nurse["memory_id"]))
    assert src2["session_id"] == "s2"
    with pytest.raises(NotFoundError):
        vstore.memory_sources("other", str(peanuts["memory_id"]))


def test_sessions_and_their_messages_in_order(vstore: Store) -> None:
    assert [s["session_id"] for s in vstore.list_sessions("u")] == ["s2", "s1"]
    assert [s["messages"] for s in vstore.list_sessions("u")] == [1, 2]
    msgs = vstore.session_messages("u", "s1")
    assert [m["message_id"] for m in msgs] == ["m1", "m2"]
    produced = {vstore.get_memory("u", i)["content"] for i in msgs[0]["memory_ids"]}  # type: ignore[index]
    assert "The user is allergic to peanuts." in produced
    assert msgs[1]["memory_ids"] == []
    # Another user's session of the same name shows only that user's messages.
    [theirs] = vstore.session_messages("other", "s1")
    assert "cats" in theirs["text"]
    with pytest.raises(NotFoundError):
        vstore.session_messages("u", "nope")
    with pytest.raises(InvalidIdError):
        vstore.session_messages("u", " s1")


def test_scene_navigation_and_users(vstore: Store) -> None:
    nav = vstore.scene_navigation("u")
    assert "Health (heat" in nav and "peanuts" in nav
    assert "cats" not in nav
    users = {u["user_id"]: u for u in vstore.list_users()}
    assert set(users) == {"u", "other"}
    assert users["u"]["messages"] == 3


def test_generations_list_and_activate(vstore: Store) -> None:
    [g0] = vstore.list_generations("u")
    assert g0["generation"] == 0 and g0["active"] and g0["memories"] == 4
    new = vstore.rederive("u")
    gens = {g["generation"]: g for g in vstore.list_generations("u")}
    assert gens[new]["active"] and not gens[0]["active"]
    assert vstore.activate_generation("u", 0) == new
    assert [g["generation"] for g in vstore.list_generations("u") if g["active"]] == [0]
    with pytest.raises(NotFoundError):
        vstore.activate_generation("u", 999)
    with pytest.raises(InvalidInputError):
        vstore.activate_generation("u", "1")  # type: ignore[arg-type]
    assert not [g for g in vstore.list_generations("other") if g["generation"] == new]


def test_recall_preview_injects_what_recall_does_and_says_why(vstore: Store) -> None:
    q = "what is the user allergic to?"
    p = vstore.recall_preview("u", q)
    plain = vstore.recall("u", q)
    assert p.recall.text == plain.text
    assert p.threshold == vstore.settings.recall.threshold
    by_text = {c.text: c for c in p.candidates}
    peanuts = by_text["The user is allergic to peanuts."]
    assert peanuts.outcome == INJECTED and peanuts.relevance >= p.threshold
    dropped = [c for c in p.candidates if c.outcome == GATED]
    assert dropped, "an off-topic memory of the user is found and gated"
    for c in dropped:
        assert c.relevance < p.threshold and "below the gate" in c.reason
    assert all("cats" not in c.text for c in p.candidates)  # never another user's
    assert {c.outcome for c in p.dropped()} <= {"gated", "explained", "left_out", "stable"}


def test_recall_preview_threshold_moves_the_gate(vstore: Store) -> None:
    q = "what is the user allergic to?"
    low = vstore.recall_preview("u", q, threshold=-10.0)
    assert not [c for c in low.candidates if c.outcome == GATED]
    assert low.recall.text == vstore.recall("u", q, threshold=-10.0).text
    high = vstore.recall_preview("u", q, threshold=50.0)
    assert high.recall.per_turn == ""
    assert {c.outcome for c in high.candidates} == {GATED}
    assert vstore.recall_preview("u", "  ").candidates == []
    with pytest.raises(InvalidInputError):
        vstore.recall_preview("u", q, threshold=float("nan"))
    with pytest.raises(InvalidIdError):
        vstore.recall_preview("", q)
