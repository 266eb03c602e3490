"""Retention: erase what is older than ``retention_days``, on a schedule or on request.

What goes is exactly what ``Store.forget_between(user, None, cutoff)`` erases
for every user: the messages said before the cutoff (by their own time, so an
imported conversation of 2023 is as old as it says), the memories extracted
from them or stated directly before it, and the scene and persona text built
from those, which are rebuilt from what is left. All users are erased in one
transaction (one replay of the projections, with the crash-safe compaction
marker), then the file is compacted once. The pipeline's scheduler runs it every
``CHECK_EVERY_S`` seconds while ``retention_days`` is above 0, as a durable
APScheduler job (``memstore.pipeline.scheduler``); ``memstore retention run``
runs it now.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import text

from memstore.derive.events import MemoryWritten
from memstore.erasure_plan import Selection
from memstore.forget import ForgetReport, erase_many, preview
from memstore.kernel import Kernel
from memstore.timeutil import to_iso

CHECK_EVERY_S = 3600.0


def cutoff(days: float, now: datetime) -> str:
    return to_iso(now - timedelta(days=days))


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


def run_retention(
    kernel: Kernel,
    *,
    days: float,
    llm: bool,
    dry_run: bool = False,
    wait_s: float = 10.0,
) -> list[ForgetReport]:
    """Erase (``dry_run``: report) everything older than ``days`` days, per user;
    only users with something to erase are reported."""
    if days <= 0:
        return []
    sel = Selection("between", end=cutoff(days, kernel.clock()))
    assert sel.end is not None
    users = users_with_data_before(kernel, sel.end)
    if dry_run:
        reports = [preview(kernel, user, sel) for user in users]
    else:
        reports = erase_many(
            kernel, [(u, sel) for u in users], llm=llm, reason="retention", wait_s=wait_s
        )
    return [r for r in reports if r.events_removed or r.events_rewritten]


__all__ = ["CHECK_EVERY_S", "cutoff", "run_retention", "users_with_data_before"]
