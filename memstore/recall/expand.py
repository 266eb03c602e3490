"""Lifts from what a question points at beyond its words: who and when.

Scored candidates (``recall.rank.collect``) get a lift added to their
relevance (kept in ``Candidate.lift`` so a re-scoring keeps it):

- the question's participants: a question that names someone who speaks in
  the conversation ("What has Melanie painted?") prefers that person's own
  turns (``SPEAKER_LIFT``) to the turns of others that only address them by
  name ("Thanks, Melanie! I painted this after…"). Questions gathered over
  many sessions (LoCoMo's multi-hop category) are mostly about one
  participant's doings;
- relative time: an item dated inside a window the question names relative to
  now or to an event it names ("yesterday", "last May", "two weeks before the
  trip"; ``recall.when``) is lifted by ``when.WHEN_LIFT``, unless a month or
  year named outright lifted it already.

A lift never admits an item on its own words alone: the candidates are the
searches' and the query-level gate still decides first. The lift weight was
chosen on three LoCoMo development conversations and checked on the other
three (docs/recall.md, BENCHMARKS.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from memstore.recall import when
from memstore.recall.query import query_names

# Relevance (the gate's scale) added to a turn spoken by a participant the
# question names.
SPEAKER_LIFT = 0.1


class Liftable(Protocol):
    """What ``lift`` reads and writes of a candidate (``recall.rank.Candidate``)."""

    kind: str
    text: str
    relevance: float
    dated: float
    lift: float

    @property
    def row(self) -> dict[str, Any]: ...


def speaker(c: Liftable) -> str:
    return str(c.row.get("speaker") or "").casefold() if c.kind == "message" else ""


def asked_about(query: str, speakers: set[str]) -> set[str]:
    """The participants (case-folded speaker names) ``query`` names, by full
    name or first name."""
    names = set(query_names(query))
    return {s for s in speakers if s in names or s.split(" ")[0] in names}


def lift(query: str, cands: Sequence[Liftable], now: datetime | None = None) -> None:
    """Add the question's lifts to ``cands`` (scored, in any order; ``now``:
    the moment of the question, default the current time)."""
    who = asked_about(query, {s for c in cands if (s := speaker(c))})
    ranked = sorted(cands, key=lambda c: -c.relevance)
    ws = when.query_windows(
        query,
        now or datetime.now(UTC),
        [(c.text, str(c.row.get("occurred_at") or "")) for c in ranked if c.kind == "message"],
    )
    if not who and not ws:
        return
    for c in cands:
        add = SPEAKER_LIFT if who and speaker(c) in who else 0.0
        if ws and not c.dated and when.in_windows(c.row, ws):
            add += when.WHEN_LIFT
        c.lift += add
        c.relevance += add
