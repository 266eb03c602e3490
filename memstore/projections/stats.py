"""Event counts per (type, user): cheap status numbers for ``doctor`` and ``status``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

from sqlalchemy import Connection

from memstore.db import rawexec
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
        # On the driver (memstore.db.rawexec): once per append.
        rawexec.run_many(
            conn,
            "INSERT INTO event_counts (type, user_id, n, last_position) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (type, user_id) DO UPDATE SET n = event_counts.n + excluded.n, "
            "last_position = excluded.last_position",
            [(t, u, n, last[(t, u)]) for (t, u), n in counts.items()],
        )
