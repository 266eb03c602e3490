"""Recall preview: what recall injects for a question, and why each
candidate was or was not injected (its scores, the gate's verdict).

The preview runs ``recall`` itself, so what it shows as injected is exactly
what a host receives; it then scores the same candidates again to explain
them. Nothing here changes what recall injects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from memstore.recall.compose import Recall, recall
from memstore.recall.rank import Candidate, collect

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

INJECTED = "injected"
STABLE = "stable"  # a standing instruction, already in the stable part
GATED = "gated"  # below the relevance threshold
EXPLAINED = "explained"  # a recalled memory made from this message stands for it
LEFT_OUT = "left_out"  # passed the gate, but no room (budget, memory limit)


@dataclass(frozen=True)
class PreviewCandidate:
    """One memory or message that the searches found for the question."""

    kind: str  # "memory" or "message"
    ref: str  # memory_id or message_id
    text: str
    session_id: str | None  # a message's session
    relevance: float  # on the gate's scale (a memory's is lifted to its sources')
    own: float  # before lifting
    similarity: float | None
    floor: float | None  # the question's mean similarity to everyday talk
    coverage: float
    search_score: float
    outcome: str
    reason: str


@dataclass(frozen=True)
class RecallPreview:
    recall: Recall  # exactly what a host receives
    threshold: float
    candidates: list[PreviewCandidate]  # best first

    def dropped(self) -> list[PreviewCandidate]:
        return [c for c in self.candidates if c.outcome != INJECTED]


def _verdict(
    c: Candidate, threshold: float, injected: set[tuple[str, str]], explainers: dict[str, str]
) -> tuple[str, str]:
    if c.standing:
        return STABLE, "a standing instruction: injected in the stable part"
    if (c.kind, c.ref) in injected:
        return INJECTED, f"relevance {c.relevance:.3f} ≥ gate {threshold:.3f}"
    if c.relevance < threshold:
        return GATED, f"relevance {c.relevance:.3f} below the gate {threshold:.3f}"
    if c.kind == "message" and c.ref in explainers:
        return EXPLAINED, f"memory {explainers[c.ref]} made from it is injected instead"
    return LEFT_OUT, "passed the gate, but the budget or the memory limit left no room"


def preview(
    ctx: DeriveContext,
    query: str,
    *,
    user_id: str,
    session_id: str | None = None,
    budget_chars: int | None = None,
    threshold: float | None = None,
) -> RecallPreview:
    gate = ctx.settings.recall.threshold if threshold is None else float(threshold)
    rec = recall(
        ctx, query, user_id=user_id, session_id=session_id,
        budget_chars=budget_chars, threshold=gate,
    )  # fmt: skip
    if not query.strip():
        return RecallPreview(rec, gate, [])
    skip = {m.memory_id for m in rec.memories if m.standing}
    cands = collect(ctx, query, user_id, session_id, skip)
    injected = {("memory", m.memory_id) for m in rec.memories if not m.standing}
    injected |= {("message", m.message_id) for m in rec.messages}
    explainers: dict[str, str] = {}
    for m in rec.memories:
        for src in m.source_message_ids:
            explainers.setdefault(src, m.memory_id)
    out = []
    for c in cands:
        outcome, reason = _verdict(c, gate, injected, explainers)
        out.append(
            PreviewCandidate(
                kind=c.kind,
                ref=c.ref,
                text=c.text,
                session_id=str(c.row["session_id"]) if c.kind == "message" else None,
                relevance=round(c.relevance, 4),
                own=round(c.own, 4),
                similarity=None if c.similarity is None else round(c.similarity, 4),
                floor=None if c.floor is None else round(c.floor, 4),
                coverage=round(c.coverage, 4),
                search_score=round(c.search_score, 4),
                outcome=outcome,
                reason=reason,
            )
        )
    return RecallPreview(rec, gate, out)


__all__ = [
    "EXPLAINED",
    "GATED",
    "INJECTED",
    "LEFT_OUT",
    "STABLE",
    "PreviewCandidate",
    "RecallPreview",
    "preview",
]
