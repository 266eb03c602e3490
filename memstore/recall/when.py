"""Relative time in a question, as date windows on the messages.

"What did I cook yesterday?", "Where did we go last May?", "What happened
two weeks before the trip?": the words name a stretch of time the answer was
said in. ``windows`` reads the expressions that are relative to the moment
of the question (``now``); ``anchored`` reads those relative to an event the
question names, whose date ``resolve`` takes from the best candidate that
mentions the event. Recall lifts the items dated inside a window by
``WHEN_LIFT`` (see ``recall.expand.lift``): a lift, not a filter, since a
speaker's "last week" is loose and a wrong window must not hide the answer.

Months and years named outright ("in May 2023", "in 2022") are read by
``recall.query.query_dates``; this module reads only what needs a reference
point. English only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from memstore.recall.text import WORD_RE, term_matches
from memstore.text.fts import STOP_WORDS

# Added to the relevance of an item dated inside a window: the same as for a
# month or year the question names outright (``recall.rank.DATE_BOOST``).
WHEN_LIFT = 0.3

_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a few": 3,
}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
RECENT_DAYS = 30  # "recently", "lately"


@dataclass(frozen=True)
class Window:
    """Dates ``start <= d < end``."""

    start: date
    end: date

    def holds(self, when: str) -> bool:
        d = parse_day(when)
        return d is not None and self.start <= d < self.end


@dataclass(frozen=True)
class Anchored:
    """A window relative to an event the question names: ``days`` before
    (negative) or after (positive) the event, ``width`` days wide (centred on
    that day), or the whole stretch up to ``days`` when ``span``."""

    days: int
    width: int
    span: bool
    event: tuple[str, ...]  # the event's content words, case-folded


def parse_day(when: str) -> date | None:
    """The date of an ISO timestamp (``occurred_at``), None when it has none."""
    try:
        return date.fromisoformat(str(when)[:10])
    except ValueError:
        return None


def _month_window(year: int, month: int) -> Window:
    end = date(year + 1, 1, 1) if month == 12 else date(year, month + 1, 1)
    return Window(date(year, month, 1), end)


def _number(word: str) -> int | None:
    w = " ".join(word.casefold().split())
    if w.isdigit():
        return int(w)
    return _NUMBERS.get(w)


_NUM = r"(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a couple of|a few)"
_UNIT = r"(day|week|month|year)s?"
_AGO_RE = re.compile(rf"\b{_NUM}\s+{_UNIT}\s+ago\b", re.I)
_LAST_RE = re.compile(r"\b(?:last|past|previous)\s+(\w+)\b", re.I)
_THIS_RE = re.compile(r"\bthis\s+(week|month|year|weekend)\b", re.I)
_RELATIVE_EVENT = re.compile(
    rf"\b(?:{_NUM}\s+{_UNIT}|the\s+{_UNIT})\s+(before|after)\s+"
    r"((?:the|a|an|my|our|your|his|her|their|\w+['’]s)\s+)?([\w'’ -]+?)"
    r"(?=[?.!,;]|$|\s+(?:when|and|did|was|were)\b)",
    re.I,
)


def windows(query: str, now: datetime) -> list[Window]:
    """The date windows ``query`` names relative to ``now``: "today",
    "yesterday", "last night", "N days/weeks/months/years ago", "last
    week/weekend/month/year", "this week/month/year", "last May", "last
    Friday", "recently"."""
    today = now.date()
    q = query.casefold()
    out: list[Window] = []
    if re.search(r"\btoday\b|\btonight\b|\bthis (?:morning|afternoon|evening)\b", q):
        out.append(Window(today, today + timedelta(days=1)))
    if re.search(r"\bday before yesterday\b", q):
        out.append(Window(today - timedelta(days=2), today - timedelta(days=1)))
    elif re.search(r"\byesterday\b|\blast night\b", q):
        out.append(Window(today - timedelta(days=1), today))
    if re.search(r"\brecently\b|\blately\b", q):
        out.append(Window(today - timedelta(days=RECENT_DAYS), today + timedelta(days=1)))
    for m in _AGO_RE.finditer(q):
        n = _number(m.group(1))
        if n is None:
            continue
        unit = m.group(2).casefold()
        if unit == "year":
            out.append(Window(date(today.year - n, 1, 1), date(today.year - n + 1, 1, 1)))
            continue
        at = today - timedelta(days=n * _UNIT_DAYS[unit])
        half = {"day": 1, "week": 3, "month": 15}[unit]
        out.append(Window(at - timedelta(days=half), at + timedelta(days=half + 1)))
    week_start = today - timedelta(days=today.weekday())
    for m in _THIS_RE.finditer(q):
        what = m.group(1).casefold()
        if what == "week":
            out.append(Window(week_start, week_start + timedelta(days=7)))
        elif what == "weekend":
            sat = week_start + timedelta(days=5)
            out.append(Window(sat, sat + timedelta(days=2)))
        elif what == "month":
            out.append(_month_window(today.year, today.month))
        else:
            out.append(Window(date(today.year, 1, 1), date(today.year + 1, 1, 1)))
    for m in _LAST_RE.finditer(q):
        what = m.group(1).casefold()
        if what == "week":
            out.append(Window(week_start - timedelta(days=7), week_start))
        elif what == "weekend":
            sat = week_start - timedelta(days=2)
            out.append(Window(sat, sat + timedelta(days=2)))
        elif what == "month":
            y, mo = (today.year, today.month - 1) if today.month > 1 else (today.year - 1, 12)
            out.append(_month_window(y, mo))
        elif what == "year":
            out.append(Window(date(today.year - 1, 1, 1), date(today.year, 1, 1)))
        elif what in _MONTHS:
            mo = _MONTHS.index(what) + 1
            out.append(_month_window(today.year if mo < today.month else today.year - 1, mo))
        elif what in _WEEKDAYS:
            back = (today.weekday() - _WEEKDAYS.index(what)) % 7 or 7
            day = today - timedelta(days=back)
            out.append(Window(day, day + timedelta(days=1)))
    return out


def anchored(query: str) -> list[Anchored]:
    """Windows ``query`` names relative to an event: "two weeks before the
    trip", "3 days after my birthday", "the week after her birthday"."""
    out: list[Anchored] = []
    for m in _RELATIVE_EVENT.finditer(query):
        num, unit, the_unit, side, _, event = m.groups()
        words = tuple(
            w.casefold() for w in WORD_RE.findall(event) if w.casefold() not in STOP_WORDS
        )
        if not words:
            continue
        sign = -1 if side.casefold() == "before" else 1
        if the_unit:  # "the week after X": the whole week that follows
            days = _UNIT_DAYS[the_unit.casefold()]
            out.append(Anchored(sign * days, days, True, words))
            continue
        n = _number(num)
        if n is None:
            continue
        days = n * _UNIT_DAYS[unit.casefold()]
        width = {"day": 3, "week": 7, "month": 31, "year": 365}[unit.casefold()]
        out.append(Anchored(sign * days, width, False, words))
    return out


def event_date(event: Sequence[str], rows: Sequence[tuple[str, str]]) -> date | None:
    """The date of the first of ``rows`` (text, occurred_at; best first) that
    mentions every word of ``event``."""
    for text_, when in rows:
        words = {w.casefold() for w in WORD_RE.findall(text_)}
        if all(any(w == e or term_matches(e, w) for w in words) for e in event):
            d = parse_day(when)
            if d is not None:
                return d
    return None


def resolve(a: Anchored, rows: Sequence[tuple[str, str]]) -> Window | None:
    """``a`` as a date window, the event dated by ``rows`` (``event_date``)."""
    at = event_date(a.event, rows)
    if at is None:
        return None
    if a.span:
        lo, hi = sorted((at, at + timedelta(days=a.days)))
        # The event's own day is not "the week after" it.
        if a.days > 0:
            return Window(lo + timedelta(days=1), hi + timedelta(days=1))
        return Window(lo, hi)
    centre = at + timedelta(days=a.days)
    half = a.width // 2
    return Window(centre - timedelta(days=half), centre + timedelta(days=a.width - half))


def query_windows(query: str, now: datetime, rows: Sequence[tuple[str, str]]) -> list[Window]:
    """Every window of ``query``: relative to ``now``, and relative to the
    events it names, dated by ``rows`` (text, occurred_at; best first)."""
    out = windows(query, now)
    for a in anchored(query):
        w = resolve(a, rows)
        if w is not None:
            out.append(w)
    return out


def in_windows(row: dict[str, Any], ws: Sequence[Window]) -> bool:
    """The row (a message, or a memory with an activity date) falls in one of ``ws``."""
    when = str(row.get("occurred_at") or row.get("activity_start") or "")
    return any(w.holds(when) for w in ws)
