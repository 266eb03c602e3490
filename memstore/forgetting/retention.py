"""Retention: erase what is older than its limit, on a schedule or on request.

``retention_days`` erases for every user exactly what
``Store.forget_between(user, None, cutoff)`` erases: the messages said before
the cutoff (by their own time, so an imported conversation of 2023 is as old
as it says), the memories extracted from them or stated before it, and the
scene and persona text built from those, which are rebuilt from what is left.
Per layer, ``retention_messages_days`` erases messages alone (the memories
extracted from them stay: their text is the deriver's) and
``retention_<type>_days`` erases memories of one type alone, by their own
time, with the scene and persona text built from them (messages stay).

Each limit is one erasure of every user concerned: one transaction, one
replay of the projections, the crash-safe compaction marker, then one
compaction. The pipeline's scheduler runs it every ``CHECK_EVERY_S`` seconds
while a limit is set, as a durable APScheduler job
(``memstore.pipeline.scheduler``); ``memstore retention run`` runs it now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import text

from memstore.config import Settings
from memstore.derive.events import MemoryWritten
from memstore.forgetting.erasure_plan import Selection
from memstore.forgetting.forget import ForgetReport, erase_many, preview
from memstore.kernel import Kernel
from memstore.timeutil import to_iso

CHECK_EVERY_S = 3600.0
MEMORY_TYPES = ("persona", "episodic", "instruction")


@dataclass(frozen=True)
class Policy:
    """Limits in days; 0 = none."""

    days: float = 0.0
    messages_days: float = 0.0
    memory_days: dict[str, float] = field(default_factory=dict)  # by memory type

    @property
    def active(self) -> bool:
        return (
            self.days > 0 or self.messages_days > 0 or any(d > 0 for d in self.memory_days.values())
        )

    @classmethod
    def of(cls, settings: Settings) -> Policy:
        p = settings.pipeline
        by_type = {
            "persona": p.retention_persona_days,
            "episodic": p.retention_episodic_days,
            "instruction": p.retention_instruction_days,
        }
        return cls(p.retention_days, p.retention_messages_days, by_type)


def cutoff(days: float, now: datetime) -> str | None:
    """The time before which something is more than ``days`` days old; None
    when that time would come before the calendar's first day (a limit of a
    billion days, or infinity): then nothing is old enough to go."""
    try:
        return to_iso(now - timedelta(days=days))
    except OverflowError:  # timedelta's bound, or before 0001-01-01
        return None


def users_with_data_before(kernel: Kernel, cut: str) -> list[str]:
    """Users with a message said, or a memory stated, before ``cut``."""
    with kernel.db.read() as conn:
        rows = conn.execute(
            text(
                "SELECT user_id FROM l0_messages WHERE occurred_at < :c "
                "UNION SELECT user_id FROM events WHERE type = :t AND occurred_at < :c"
            ),
            {"c": cut, "t": MemoryWritten.TYPE},
        )
        return sorted({str(r[0]) for r in rows})


def _old_memories(kernel: Kernel, type_: str, cut: str) -> dict[str, frozenset[str]]:
    """Memories of ``type_`` (any status and generation) older than ``cut``, by user."""
    out: dict[str, set[str]] = {}
    with kernel.db.read() as conn:
        rows = conn.execute(
            text("SELECT user_id, memory_id FROM l1_memories WHERE type = :t AND occurred_at < :c"),
            {"t": type_, "c": cut},
        )
        for user, mid in rows:
            out.setdefault(str(user), set()).add(str(mid))
    return {u: frozenset(ids) for u, ids in sorted(out.items())}


def _passes(kernel: Kernel, policy: Policy) -> list[list[tuple[str, Selection]]]:
    """One list of (user, selection) per limit that is set."""
    now = kernel.clock()
    out: list[list[tuple[str, Selection]]] = []
    cut = cutoff(policy.days, now) if policy.days > 0 else None
    if cut is not None:
        sel = Selection("between", end=cut)
        out.append([(u, sel) for u in users_with_data_before(kernel, cut)])
    cut = cutoff(policy.messages_days, now) if policy.messages_days > 0 else None
    if cut is not None:
        sel = Selection("between", end=cut, messages_only=True)
        out.append([(u, sel) for u in users_with_data_before(kernel, cut)])
    for type_ in MEMORY_TYPES:
        days = policy.memory_days.get(type_, 0.0)
        cut = cutoff(days, now) if days > 0 else None
        if cut is not None:
            old = _old_memories(kernel, type_, cut)
            out.append(
                [(u, Selection("memory", memory_ids=ids, with_sources=False))
                 for u, ids in old.items()]
            )  # fmt: skip
    return [p for p in out if p]


def run_retention(
    kernel: Kernel,
    policy: Policy,
    *,
    llm: bool,
    dry_run: bool = False,
    wait_s: float = 10.0,
) -> list[ForgetReport]:
    """Erase (``dry_run``: report) everything past ``policy``'s limits; one
    report per user and limit with something to erase. A dry run reports each
    limit on its own (what one limit erases may overlap another's)."""
    reports: list[ForgetReport] = []
    for wanted in _passes(kernel, policy):
        if dry_run:
            reports += [preview(kernel, u, sel) for u, sel in wanted]
        else:
            reports += erase_many(kernel, wanted, llm=llm, reason="retention", wait_s=wait_s)
    return [r for r in reports if r.events_removed or r.events_rewritten]


__all__ = ["CHECK_EVERY_S", "Policy", "cutoff", "run_retention", "users_with_data_before"]
