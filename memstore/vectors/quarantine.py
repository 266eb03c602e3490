"""Rows the indexer could not embed, set aside so the rest keeps indexing.

A poison row (the model returns NaN for it, or rejects that one input) used
to fail every indexer step, so nobody's later messages were ever embedded.
Such a row is recorded here instead, with its error; the L0 cursor moves past
it, the L1 scan skips it while its text is unchanged, and the indexer retries
it once ``retry_after`` has passed, backing off up to a day. Rows hold ids, a
content hash and our own error text only, never user content.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, delete, func, select

from memstore.db import rawexec
from memstore.db.backend import upsert
from memstore.db.schema import vector_quarantine as vq
from memstore.db.sqlfn import in_list
from memstore.redact import redact
from memstore.timeutil import timedelta, to_iso

FIRST_RETRY_S = 60.0
MAX_RETRY_S = 86400.0


@dataclass(frozen=True)
class Quarantined:
    space: str
    source_id: int
    user_id: str
    error: str
    attempts: int
    first_failed_at: str
    retry_after: str


def backoff_s(attempts: int) -> float:
    return min(MAX_RETRY_S, FIRST_RETRY_S * float(2 ** max(0, min(attempts - 1, 20))))


def record(
    conn: Connection,
    space: str,
    items: list[tuple[int, str, str]],
    error: str,
    *,
    now: datetime,
) -> None:
    """Quarantine ``(source_id, user_id, content_hash)`` rows, or count one
    more failed attempt for rows already here."""
    for source_id, user_id, chash in items:
        row = conn.execute(
            select(vq.c.attempts).where(vq.c.space == space, vq.c.source_id == source_id)
        ).first()
        attempts = (int(row[0]) if row else 0) + 1
        values = {
            "space": space,
            "source_id": source_id,
            "user_id": user_id,
            "content_hash": chash,
            "error": redact(error)[:500],
            "attempts": attempts,
            "first_failed_at": to_iso(now),
            "retry_after": to_iso(now + timedelta(seconds=backoff_s(attempts))),
        }
        stmt = upsert(vq).values(**values)
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=[vq.c.space, vq.c.source_id],
                set_={k: v for k, v in values.items() if k not in ("space", "first_failed_at")},
            )
        )


def due(conn: Connection, space: str, *, now: datetime, limit: int) -> list[int]:
    rows = conn.execute(
        select(vq.c.source_id)
        .where(vq.c.space == space, vq.c.retry_after <= to_iso(now))
        .order_by(vq.c.source_id)
        .limit(limit)
    )
    return [int(r[0]) for r in rows]


def held(conn: Connection, space: str, source_ids: list[int]) -> set[int]:
    """Which of ``source_ids`` are in quarantine (read before a write, so the
    write deletes only rows that exist; usually none)."""
    out: set[int] = set()
    for i in range(0, len(source_ids), 500):
        # Driver-level (memstore.db.rawexec): the indexer asks once per batch.
        marks, values = in_list(source_ids[i : i + 500])
        rows = rawexec.rows(
            conn,
            f"SELECT source_id FROM vector_quarantine WHERE space = ? AND source_id IN ({marks})",
            [space, *values],
        )
        out.update(int(r[0]) for r in rows)
    return out


def release(conn: Connection, space: str, source_ids: list[int]) -> None:
    """Forget rows that were embedded after all, or whose source is gone."""
    for i in range(0, len(source_ids), 500):
        conn.execute(
            delete(vq).where(vq.c.space == space, vq.c.source_id.in_(source_ids[i : i + 500]))
        )


def clear_space(conn: Connection, space: str) -> None:
    conn.execute(delete(vq).where(vq.c.space == space))


def counts(conn: Connection) -> dict[str, int]:
    rows = conn.execute(select(vq.c.space, func.count()).group_by(vq.c.space))
    return {str(s): int(n) for s, n in rows}


def items(conn: Connection, limit: int = 20) -> list[Quarantined]:
    rows = conn.execute(select(vq).order_by(vq.c.space, vq.c.source_id).limit(limit))
    return [
        Quarantined(
            r.space,
            int(r.source_id),
            r.user_id,
            r.error,
            int(r.attempts),
            r.first_failed_at,
            r.retry_after,
        )
        for r in rows
    ]


# The SQL the L1 scan uses to skip a memory quarantined with its current text.
NOT_QUARANTINED = (
    "NOT EXISTS (SELECT 1 FROM vector_quarantine vq WHERE vq.space = :s "
    "AND vq.source_id = m.id AND vq.content_hash = m.content_hash)"
)

__all__ = [
    "NOT_QUARANTINED",
    "Quarantined",
    "backoff_s",
    "clear_space",
    "counts",
    "due",
    "held",
    "items",
    "record",
    "release",
]
