"""Relative time in a question (``recall.when``) and the lifts recall adds
for it and for the participants a question names (``recall.expand``).

The parser is tested against a fixed moment; the recall tests use a real
SQLite store (FTS5, sqlite-vec) with the hashing embedder and messages dated
relative to the real current time, since recall reads the question's time
from the clock.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from memstore import Store
from memstore.recall import expand, when
from memstore.recall.when import Anchored, Window

# The recall tests use tests/backends.py's store: one per engine.
pytestmark = pytest.mark.both_backends

NOW = datetime(2024, 3, 13, 12, 0, tzinfo=UTC)  # a Wednesday


def d(s: str) -> date:
    return date.fromisoformat(s)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did I cook yesterday?", [("2024-03-12", "2024-03-13")]),
        ("What did we talk about last night?", [("2024-03-12", "2024-03-13")]),
        ("What happened the day before yesterday?", [("2024-03-11", "2024-03-12")]),
        ("What am I doing today?", [("2024-03-13", "2024-03-14")]),
        ("Where did we go last May?", [("2023-05-01", "2023-06-01")]),
        ("What did I buy last February?", [("2024-02-01", "2024-03-01")]),
        ("What did I read last week?", [("2024-03-04", "2024-03-11")]),
        ("What did we do last weekend?", [("2024-03-09", "2024-03-11")]),
        ("What did I plan last month?", [("2024-02-01", "2024-03-01")]),
        ("Where did I travel last year?", [("2023-01-01", "2024-01-01")]),
        ("What happened last Friday?", [("2024-03-08", "2024-03-09")]),
        ("What did I eat last Wednesday?", [("2024-03-06", "2024-03-07")]),
        ("What did we do 3 days ago?", [("2024-03-09", "2024-03-12")]),
        ("What did I do two weeks ago?", [("2024-02-25", "2024-03-03")]),
        ("What did I do a couple of weeks ago?", [("2024-02-25", "2024-03-03")]),
        ("Where did I live two years ago?", [("2022-01-01", "2023-01-01")]),
        ("What have I been busy with this week?", [("2024-03-11", "2024-03-18")]),
        ("What did I paint recently?", [("2024-02-12", "2024-03-14")]),
    ],
)
def test_windows_relative_to_now(query: str, expected: list[tuple[str, str]]) -> None:
    assert when.windows(query, NOW) == [Window(d(a), d(b)) for a, b in expected]


def test_last_month_in_january_is_last_years_december() -> None:
    jan = datetime(2024, 1, 10, tzinfo=UTC)
    assert when.windows("What did I do last month?", jan) == [
        Window(d("2023-12-01"), d("2024-01-01"))
    ]


@pytest.mark.parametrize(
    "query",
    [
        "What is the capital of Australia?",
        "May I ask where she lives?",
        "What did Melanie paint in 2022?",  # an absolute year: recall.query reads it
        "What did I say about the last chapter?",
        "",
    ],
)
def test_no_relative_time_no_window(query: str) -> None:
    assert when.windows(query, NOW) == []
    assert when.anchored(query) == []


def test_anchored_expressions() -> None:
    assert when.anchored("What did I cook two weeks before the trip?") == [
        Anchored(-14, 7, False, ("trip",))
    ]
    assert when.anchored("What did she do the week after her birthday?") == [
        Anchored(7, 7, True, ("birthday",))
    ]
    assert when.anchored("Where was he 3 days after his graduation party?") == [
        Anchored(3, 3, False, ("graduation", "party"))
    ]


def test_resolve_dates_the_event_by_the_first_row_that_mentions_it() -> None:
    rows = [
        ("We had cake, nothing special.", "2024-01-02T10:00:00"),
        ("My birthday party was great!", "2024-02-10T18:00:00"),
        ("Another birthday next year.", "2024-06-01T10:00:00"),
    ]
    week_after = when.resolve(Anchored(7, 7, True, ("birthday",)), rows)
    assert week_after == Window(d("2024-02-11"), d("2024-02-18"))
    week_before = when.resolve(Anchored(-7, 7, True, ("birthday",)), rows)
    assert week_before == Window(d("2024-02-03"), d("2024-02-10"))
    two_weeks_before = when.resolve(Anchored(-14, 7, False, ("birthday", "party")), rows)
    assert two_weeks_before == Window(d("2024-01-24"), d("2024-01-31"))
    assert when.resolve(Anchored(-14, 7, False, ("wedding",)), rows) is None


def test_in_windows_reads_messages_and_memories() -> None:
    ws = [Window(d("2024-03-01"), d("2024-03-02"))]
    assert when.in_windows({"occurred_at": "2024-03-01T23:59:00"}, ws)
    assert not when.in_windows({"occurred_at": "2024-03-02T00:00:00"}, ws)
    assert when.in_windows({"activity_start": "2024-03-01"}, ws)
    assert not when.in_windows({"occurred_at": None}, ws)
    assert not when.in_windows({"occurred_at": "not a date"}, ws)


def test_asked_about_matches_full_and_first_names() -> None:
    speakers = {"melanie", "caroline smith", "james"}
    assert expand.asked_about("What has Melanie painted?", speakers) == {"melanie"}
    assert expand.asked_about("Where did Caroline move from?", speakers) == {"caroline smith"}
    assert expand.asked_about("what has melanie painted?", speakers) == set()  # not a name
    assert expand.asked_about("What is the capital of France?", speakers) == set()


# -- recall -----------------------------------------------------------------------


def _at(days_ago: int) -> str:
    return (datetime.now(UTC) - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M:%S")


def _capture(store: Store, user: str, turns: list[tuple[str, str, int]]) -> None:
    for i, (who, text, days_ago) in enumerate(turns):
        store.capture(
            user,
            f"s{i}",
            [
                {
                    "role": "user",
                    "name": who,
                    "content": text,
                    "id": f"m{i}",
                    "timestamp": _at(days_ago),
                }
            ],
        )
    store.reindex()


def _relevance(store: Store, query: str, user: str) -> dict[str, float]:
    r = store.recall(user, query, session_id="now", threshold=0.0)
    return {m.message_id: m.relevance for m in r.messages if m.context_for is None}


def test_recall_lifts_the_message_said_yesterday(store: Store) -> None:
    _capture(
        store,
        "u",
        [
            ("Ana", "I made a pasta carbonara for dinner.", 1),
            ("Ana", "I made a pasta with pesto for dinner.", 12),
        ],
    )
    got = _relevance(store, "Which pasta did I make for dinner yesterday?", "u")
    assert got["m0"] > got["m1"]
    assert got["m0"] == pytest.approx(got["m1"] + when.WHEN_LIFT, abs=1e-3)
    # Without the time expression both score the same.
    plain = _relevance(store, "Which pasta did I make for dinner?", "u")
    assert plain["m0"] == pytest.approx(plain["m1"], abs=1e-3)


def test_recall_lifts_the_message_two_weeks_before_the_named_event(store: Store) -> None:
    _capture(
        store,
        "u",
        [
            ("Ana", "We finally leave for the trip to Lisbon tomorrow!", 20),
            ("Ana", "I cooked a mushroom risotto tonight.", 34),
            ("Ana", "I cooked a lamb curry tonight.", 60),
        ],
    )
    got = _relevance(store, "What did I cook two weeks before the trip?", "u")
    assert got["m1"] > got["m2"]
    assert got["m1"] == pytest.approx(got["m2"] + when.WHEN_LIFT, abs=1e-3)


def test_recall_prefers_the_named_participants_own_turns(store: Store) -> None:
    _capture(
        store,
        "chat",
        [
            ("Ana", "Thanks Ben, the kayak trip sounds amazing.", 3),
            ("Ben", "The kayak trip was amazing, we paddled for hours.", 3),
        ],
    )
    got = _relevance(store, "What did Ben say about the kayak trip?", "chat")
    assert got["m1"] == pytest.approx(got["m0"] + expand.SPEAKER_LIFT, abs=0.05)
    assert got["m1"] > got["m0"]
