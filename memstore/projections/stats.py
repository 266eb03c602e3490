"""Event counts per (type, user): cheap status numbers for ``doctor`` and ``status``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

from sqlalchemy import Connection
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from memstore.db.schema import event_counts
from memstore.events.log import StoredEvent
from memstore.projections.base import Projection


class StatsProjection(Projection):
    name: ClassVar[str] = "stats"
    handles: ClassVar[frozenset[str] | None] = None
    tables = (event_counts,)

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        counts: Counter[tuple[str, str]] = Counter()
        last: dict[tuple[str, str], int] = {}
        for e in events:
            key = (e.type, e.user_id)
            counts[key] += 1
            last[key] = e.position
        for (type_, user), n in counts.items():
            stmt = sqlite_insert(event_counts).values(
                type=type_, user_id=user, n=n, last_position=last[(type_, user)]
            )
            stmt = stmt.on_conflict_do_update(
                index_elements=[event_counts.c.type, event_counts.c.user_id],
                set_={"n": event_counts.c.n + n, "last_position": last[(type_, user)]},
            )
            conn.execute(stmt)
