"""The stored instant format: one fixed-width UTC text, whatever comes in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from memstore.errors import InvalidInputError
from memstore.timeutil import from_iso, to_iso

_AT = "2023-05-08T13:56:00.000000Z"


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        (datetime(2023, 5, 8, 13, 56, tzinfo=UTC), _AT),
        # Naive instants are taken as UTC.
        (datetime(2023, 5, 8, 13, 56, 1, 5), "2023-05-08T13:56:01.000005Z"),
        # Other zones are converted, fixed offsets and named ones alike.
        (datetime(2023, 5, 8, 18, 56, tzinfo=timezone(timedelta(hours=5))), _AT),
        (datetime(2023, 5, 8, 15, 56, tzinfo=ZoneInfo("Europe/Paris")), _AT),
        (datetime(2023, 5, 8, 13, 56, tzinfo=ZoneInfo("UTC")), _AT),
        (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "9999-12-31T23:59:59.999999Z"),
    ],
)
def test_to_iso_gives_fixed_width_utc(given: datetime, stored: str) -> None:
    assert to_iso(given) == stored
    back = from_iso(stored)
    assert back == given.replace(tzinfo=given.tzinfo or UTC)
    assert back.tzinfo is UTC


def test_round_trip_keeps_microseconds_and_order() -> None:
    start = datetime(2024, 2, 29, 23, 59, 59, 999_990, tzinfo=UTC)
    stamps = [start + timedelta(microseconds=3 * i) for i in range(10)]
    texts = [to_iso(s) for s in stamps]
    assert texts == sorted(texts)
    assert [from_iso(t) for t in texts] == stamps


def test_out_of_range_is_a_clear_error() -> None:
    late = datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5)))
    with pytest.raises(InvalidInputError, match="out of range"):
        to_iso(late)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "2023-05-08",
        "2023-05-08T13:56:00Z",
        "2023-05-08T13:56:00.000000",
        "2023-05-08 13:56:00.000000Z",
        "2023-13-08T13:56:00.000000Z",
        "2023-05-08T13:56:00.00000xZ",
        "not a timestamp at all, no!",
    ],
)
def test_from_iso_refuses_other_text(bad: str) -> None:
    with pytest.raises(ValueError):
        from_iso(bad)
