"""Speakers as data: a participant named only in the message's ``name`` is
found by search and recall, can be filtered on, and is shown in excerpts.

A real SQLite store with FTS5 and sqlite-vec, the hashing embedder (fast,
offline); several named users in one session, as a group chat captures them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memstore import Settings, Store
from memstore.derive.messages.columns import labelled_text
from memstore.errors import InvalidInputError
from tests.backends import Targets

pytestmark = pytest.mark.both_backends

GROUP = [
    ("Ana", "I booked the cabin by the lake for the first weekend of June."),
    ("Ben", "I can drive, my van fits six people and the kayaks."),
    ("Chloe", "I'll bring the tent and the camping stove."),
    ("Ben", "Remember I'm allergic to shellfish, so no seafood barbecue please."),
    ("Ana", "Noted. I'll plan a vegetarian menu instead."),
    ("Chloe", "My sister might join us on Saturday."),
]


@pytest.fixture()
def group(new_target: Targets) -> Iterator[Store]:
    settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(new_target("g.db"), settings=settings) as store:
        store.capture(
            "trip-chat",
            "s1",
            [
                {
                    "role": "user",
                    "name": who,
                    "content": text,
                    "id": f"m{i}",
                    "timestamp": f"2024-05-0{i + 1}T10:00:00",
                }
                for i, (who, text) in enumerate(GROUP)
            ],
        )
        store.reindex()
        yield store


def test_labelled_text_adds_the_name_once() -> None:
    assert labelled_text("Ben", "I can drive.") == "Ben: I can drive."
    assert labelled_text("Ben", "ben: I can drive.") == "ben: I can drive."
    assert labelled_text(None, "I can drive.") == "I can drive."


def test_every_named_user_is_stored_with_their_name(group: Store) -> None:
    with group._db.read() as conn:
        rows = conn.exec_driver_sql(
            "SELECT message_id, role, speaker FROM l0_messages WHERE user_id = 'trip-chat' "
            "ORDER BY id"
        ).all()
    assert [(r[1], r[2]) for r in rows] == [("user", who) for who, _ in GROUP]


@pytest.mark.parametrize("strategy", ["keyword", "hybrid"])
def test_a_name_only_in_metadata_is_searchable(group: Store, strategy: str) -> None:
    hits = group.search_conversations("trip-chat", "What did Ben say?", strategy=strategy, limit=3)
    # Neither of Ben's messages holds his name; both rank first.
    assert {h.ref for h in hits[:2]} == {"m1", "m3"}


def test_the_speaker_filter_keeps_one_participant(group: Store) -> None:
    hits = group.search_conversations("trip-chat", "food", speaker="ben", limit=10)
    assert hits and {h.ref for h in hits} <= {"m1", "m3"}
    assert "m3" in {h.ref for h in hits}
    assert group.search_conversations("trip-chat", "food", speaker="Nobody") == []


def test_recall_by_speaker_shows_who_spoke(group: Store) -> None:
    r = group.recall("trip-chat", "What is Ben allergic to?", session_id="later", threshold=0.0)
    assert "m3" in {m.message_id for m in r.messages}
    assert "Ben, user]" in r.per_turn  # the excerpt's head names the speaker
    only = group.recall(
        "trip-chat",
        "camping trip plans",
        session_id="later",
        speaker="Chloe",
        threshold=0.0,
    )
    hits = [m for m in only.messages if m.context_for is None]
    assert hits and {m.speaker for m in hits} == {"Chloe"}


@pytest.mark.parametrize("bad", ["", "   ", 3])
def test_a_bad_speaker_filter_is_refused(group: Store, bad: object) -> None:
    with pytest.raises(InvalidInputError):
        group.search_conversations("trip-chat", "food", speaker=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        group.recall("trip-chat", "food", speaker=bad)  # type: ignore[arg-type]
