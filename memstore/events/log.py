"""The append-only event log: the only source of truth.

Appends run inside a caller's write transaction (``Database.write``) so that
inline projections and pipeline state change atomically with the log. Batches
are inserted with one Core ``executemany``; positions are assigned here while
the write lock is held, which keeps them dense and lets us return them without
RETURNING.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, exc, func, select

from memstore.db.schema import events as events_t
from memstore.errors import ConcurrencyError, InvalidInputError
from memstore.events.types import Event, Registry, registry
from memstore.timeutil import Clock, system_clock, to_iso


@dataclass(frozen=True)
class NewEvent:
    stream: str
    payload: Event
    user_id: str = ""
    occurred_at: datetime | None = None
    idempotency_key: str | None = None
    causation_id: str | None = None
    correlation_id: str | None = None
    # When set, the stream must currently end at this sequence (0 = empty).
    expected_seq: int | None = None


@dataclass(frozen=True)
class StoredEvent:
    position: int
    event_id: str
    stream: str
    seq: int
    type: str
    version: int
    user_id: str
    payload: Event
    occurred_at: str
    recorded_at: str
    idempotency_key: str | None = None
    causation_id: str | None = None
    correlation_id: str | None = None
    duplicate: bool = field(default=False, compare=False)


_COLUMNS = (
    events_t.c.position,
    events_t.c.event_id,
    events_t.c.stream,
    events_t.c.seq,
    events_t.c.type,
    events_t.c.version,
    events_t.c.user_id,
    events_t.c.payload,
    events_t.c.occurred_at,
    events_t.c.recorded_at,
    events_t.c.idempotency_key,
    events_t.c.causation_id,
    events_t.c.correlation_id,
)


def _row(e: StoredEvent) -> dict[str, Any]:
    return {
        "position": e.position,
        "event_id": e.event_id,
        "stream": e.stream,
        "seq": e.seq,
        "type": e.type,
        "version": e.version,
        "user_id": e.user_id,
        "payload": json.dumps(e.payload.to_dict(), ensure_ascii=False, separators=(",", ":")),
        "occurred_at": e.occurred_at,
        "recorded_at": e.recorded_at,
        "idempotency_key": e.idempotency_key,
        "causation_id": e.causation_id,
        "correlation_id": e.correlation_id,
    }


class EventLog:
    def __init__(self, reg: Registry = registry, clock: Clock = system_clock) -> None:
        self.registry = reg
        self.clock = clock

    # -- writing ---------------------------------------------------------

    def append(self, conn: Connection, new: Sequence[NewEvent]) -> list[StoredEvent]:
        """Append events in the caller's (IMMEDIATE) transaction.

        An event whose idempotency key is already stored is not written again;
        the stored one is returned with ``duplicate=True``.
        """
        if not new:
            return []
        keys = [n.idempotency_key for n in new if n.idempotency_key]
        existing: dict[str, StoredEvent] = {}
        if keys:
            for chunk_start in range(0, len(keys), 500):
                chunk = keys[chunk_start : chunk_start + 500]
                rows = conn.execute(
                    select(*_COLUMNS).where(events_t.c.idempotency_key.in_(chunk))
                ).all()
                for r in rows:
                    ev = self._decode(r)
                    existing[str(r.idempotency_key)] = replace(ev, duplicate=True)
        position = int(
            conn.execute(select(func.coalesce(func.max(events_t.c.position), 0))).scalar_one()
        )
        heads: dict[str, int] = {}
        now = to_iso(self.clock())
        rows_out: list[dict[str, Any]] = []
        result: list[StoredEvent] = []
        seen_keys: dict[str, StoredEvent] = {}
        for n in new:
            if not n.stream:
                raise InvalidInputError("event stream must not be empty")
            if n.idempotency_key and n.idempotency_key in existing:
                result.append(existing[n.idempotency_key])
                continue
            if n.idempotency_key and n.idempotency_key in seen_keys:
                result.append(replace(seen_keys[n.idempotency_key], duplicate=True))
                continue
            if n.stream not in heads:
                heads[n.stream] = self.stream_head(conn, n.stream)
            head = heads[n.stream]
            if n.expected_seq is not None and n.expected_seq != head:
                raise ConcurrencyError(n.stream, n.expected_seq, f"stream is at {head}")
            position += 1
            seq = head + 1
            heads[n.stream] = seq
            payload_cls = type(n.payload)
            stored = StoredEvent(
                position=position,
                event_id=uuid.uuid4().hex,
                stream=n.stream,
                seq=seq,
                type=payload_cls.TYPE,
                version=payload_cls.VERSION,
                user_id=n.user_id,
                payload=n.payload,
                occurred_at=to_iso(n.occurred_at) if n.occurred_at else now,
                recorded_at=now,
                idempotency_key=n.idempotency_key,
                causation_id=n.causation_id,
                correlation_id=n.correlation_id,
            )
            rows_out.append(_row(stored))
            if n.idempotency_key:
                seen_keys[n.idempotency_key] = stored
            result.append(stored)
        if rows_out:
            try:
                conn.execute(events_t.insert(), rows_out)
            except exc.IntegrityError as e:
                # Another process appended to the same stream between our read of
                # the head and the insert is impossible under BEGIN IMMEDIATE, so
                # this is a caller bypassing the write transaction.
                raise ConcurrencyError(rows_out[0]["stream"], None, str(e.orig)) from e
        return result

    @staticmethod
    def stream_head(conn: Connection, stream: str) -> int:
        return int(
            conn.execute(
                select(func.coalesce(func.max(events_t.c.seq), 0)).where(
                    events_t.c.stream == stream
                )
            ).scalar_one()
        )

    # -- reading ---------------------------------------------------------

    def read(
        self,
        conn: Connection,
        *,
        after: int = 0,
        types: Iterable[str] | None = None,
        user_id: str | None = None,
        limit: int | None = None,
        until: int | None = None,
    ) -> list[StoredEvent]:
        conds = [events_t.c.position > after]
        if until is not None:
            conds.append(events_t.c.position <= until)
        if types is not None:
            conds.append(events_t.c.type.in_(list(types)))
        if user_id is not None:
            conds.append(events_t.c.user_id == user_id)
        q = select(*_COLUMNS).where(and_(*conds)).order_by(events_t.c.position)
        if limit is not None:
            q = q.limit(limit)
        return [self._decode(r) for r in conn.execute(q)]

    def iter_all(
        self,
        conn: Connection,
        *,
        after: int = 0,
        batch: int = 2000,
        types: Iterable[str] | None = None,
    ) -> Iterator[list[StoredEvent]]:
        type_list = list(types) if types is not None else None
        while True:
            chunk = self.read(conn, after=after, types=type_list, limit=batch)
            if not chunk:
                return
            yield chunk
            after = chunk[-1].position

    def read_stream(
        self, conn: Connection, stream: str, *, after_seq: int = 0
    ) -> list[StoredEvent]:
        q = (
            select(*_COLUMNS)
            .where(events_t.c.stream == stream, events_t.c.seq > after_seq)
            .order_by(events_t.c.seq)
        )
        return [self._decode(r) for r in conn.execute(q)]

    def get(self, conn: Connection, event_id: str) -> StoredEvent | None:
        r = conn.execute(select(*_COLUMNS).where(events_t.c.event_id == event_id)).first()
        return self._decode(r) if r is not None else None

    @staticmethod
    def last_position(conn: Connection) -> int:
        return int(
            conn.execute(select(func.coalesce(func.max(events_t.c.position), 0))).scalar_one()
        )

    def _decode(self, r: Any) -> StoredEvent:
        payload = self.registry.decode(r.type, int(r.version), json.loads(r.payload))
        return StoredEvent(
            position=int(r.position),
            event_id=r.event_id,
            stream=r.stream,
            seq=int(r.seq),
            type=r.type,
            version=payload.VERSION,
            user_id=r.user_id,
            payload=payload,
            occurred_at=r.occurred_at,
            recorded_at=r.recorded_at,
            idempotency_key=r.idempotency_key,
            causation_id=r.causation_id,
            correlation_id=r.correlation_id,
        )
