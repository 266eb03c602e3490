"""Time helpers: one text format for stored instants, and a replaceable clock.

Instants are stored as fixed-width UTC ISO-8601 text with microseconds
(``2023-05-08T13:56:00.000000Z``) so that text order is time order in SQL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

from memstore.errors import InvalidInputError

_FMT = "%Y-%m-%dT%H:%M:%S.%fZ"


class Clock(Protocol):
    def __call__(self) -> datetime: ...


def system_clock() -> datetime:
    return datetime.now(UTC)


def to_iso(dt: datetime) -> str:
    try:
        # Most instants are UTC already (the clock's): astimezone cost as
        # much as the formatting, on every capture.
        if dt.tzinfo is not UTC:
            dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
        return dt.strftime(_FMT)
    except (OverflowError, ValueError) as exc:
        raise InvalidInputError(f"timestamp out of range: {dt!r}") from exc


def from_iso(text: str) -> datetime:
    # The stored form parses in C (0.2 us); strptime, kept for anything
    # else and for its error, took 6 us, on every capture.
    if len(text) == 27 and text[10] == "T" and text[19] == "." and text[26] == "Z":
        return datetime.fromisoformat(text)
    return datetime.strptime(text, _FMT).replace(tzinfo=UTC)


def parse_when(value: object) -> datetime:
    """Accept a datetime, epoch seconds (or milliseconds) or ISO-8601 text.

    Years outside 1000..9999 are refused: stored instants are fixed-width text."""
    dt = _parse_when(value)
    try:
        # A local time near year 1 or 9999 can fall outside datetime's range
        # once shifted to UTC ("9999-12-31T23:00:00-05:00").
        year = dt.astimezone(UTC).year
    except (OverflowError, ValueError) as exc:
        raise InvalidInputError(f"timestamp out of range (years 1000-9999): {value!r}") from exc
    if not 1000 <= year <= 9999:
        raise InvalidInputError(f"timestamp out of range (years 1000-9999): {value!r}")
    return dt


def _parse_when(value: object) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, bool):
        raise InvalidInputError(f"not a timestamp: {value!r}")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
            if seconds > 1e11:  # milliseconds, as JavaScript hosts send
                seconds /= 1000.0
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise InvalidInputError(f"timestamp out of range: {value!r}") from exc
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError as exc:
            raise InvalidInputError(f"not an ISO-8601 timestamp: {value!r}") from exc
        return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    raise InvalidInputError(f"not a timestamp: {value!r}")


__all__ = ["UTC", "Clock", "from_iso", "parse_when", "system_clock", "timedelta", "to_iso"]
