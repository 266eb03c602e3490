"""The append-only event log: the only source of truth.

Appends run inside a caller's write transaction (``Database.write``) so that
inline projections and pipeline state change atomically with the log. Batches
are inserted with one Core ``executemany``; positions are assigned here while
the write lock is held, which keeps them dense and lets us return them without
RETURNING.

The write lock is SQLite's ``BEGIN IMMEDIATE`` on a file and one advisory lock
held to COMMIT on PostgreSQL (memstore.db.postgres explains why not a
sequence): on both, ``max(position) + 1`` is taken by one writer at a time and
positions become visible in commit order without gaps, for any number of
processes. The unique index on ``idempotency_key`` (and on ``(stream, seq)``)
enforces in the database what the checks here do first.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, exc, select

from memstore.db import rawexec
from memstore.db.schema import events as events_t
from memstore.db.sqlfn import driver_rows, driver_sql, in_list
from memstore.db.sqlfn import limit as limit_sql
from memstore.errors import ConcurrencyError, InvalidInputError
from memstore.events.types import Event, Registry, registry
from memstore.timeutil import Clock, system_clock, to_iso


def new_event_id() -> str:
    """A new event's id: 32 hex digits, the time in milliseconds (48 bits)
    then 80 random bits, so ids of later events sort after earlier ones.

    Random ids (``uuid4``) put each event's entry of the unique ``event_id``
    index on a random page of it, which the transaction then writes: one
    page per event. In time order they go to the index's last page: a batch
    of 8 captures wrote 7% fewer bytes to the store's files (51.4 -> 48.0
    KiB per capture, WAL and checkpoints, ``/proc/self/io``)."""
    return f"{time.time_ns() // 1_000_000:012x}{int.from_bytes(os.urandom(10), 'big'):020x}"


def stream_name(*parts: str) -> str:
    """A stream name from its parts (``l0``, user, session), joined by "/".

    "%" and "/" inside a part are percent-escaped, so distinct parts never give
    one name: user "a" session "b/s1" is ``l0/a/b%2Fs1``, user "a/b" session
    "s1" is ``l0/a%2Fb/s1``. Parts without those characters are unchanged,
    which keeps the names of existing streams (migration 0010 renamed the rest).
    """
    return "/".join(p.replace("%", "%25").replace("/", "%2F") for p in parts)


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


_SELECT = ", ".join(c.name for c in _COLUMNS)
# StoredEvent's first fields: _COLUMNS' names in their order ("duplicate" follows).
_COLUMN_FIELDS = tuple(c.name for c in _COLUMNS)
_new_object = object.__new__

_INSERT = (
    "INSERT INTO events (position, event_id, stream, seq, type, version, user_id, payload, "
    "occurred_at, recorded_at, idempotency_key, causation_id, correlation_id) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_scan = json.JSONDecoder().raw_decode


def _loads(payload: str) -> Any:
    """``json.loads`` for the compact JSON ``_dumps`` writes: the scanner
    alone, without loads' two whitespace regex matches per call (a replay
    decodes every event). Anything else — surrounding whitespace, trailing
    data — goes through ``json.loads``, which accepts or rejects it as before."""
    try:
        value, end = _scan(payload)
    except json.JSONDecodeError:
        return json.loads(payload)
    return value if end == len(payload) else json.loads(payload)


def encode_payload(payload: Event) -> str:
    """The text the ``payload`` column stores for ``payload``."""
    return _dumps(payload.pack())


def _row(e: StoredEvent) -> tuple[Any, ...]:
    return (
        e.position,
        e.event_id,
        e.stream,
        e.seq,
        e.type,
        e.version,
        e.user_id,
        encode_payload(e.payload),
        e.occurred_at,
        e.recorded_at,
        e.idempotency_key,
        e.causation_id,
        e.correlation_id,
    )


_HEAD = "SELECT coalesce(max(position), 0) FROM events"


class EventLog:
    def __init__(self, reg: Registry = registry, clock: Clock = system_clock) -> None:
        self.registry = reg
        self.clock = clock
        self._cache_lock = threading.Lock()
        self._head_cache: dict[str, int] = {}
        self._cache_position = -1

    # -- writing ---------------------------------------------------------

    def append(
        self, conn: Connection, new: Sequence[NewEvent], *, after: int = 0
    ) -> list[StoredEvent]:
        """Append events in the caller's (IMMEDIATE) transaction.

        An event whose idempotency key is already stored is not written again;
        the stored one is returned with ``duplicate=True``. ``after`` is a floor
        for positions: erasure passes the head it deleted from, so positions
        never repeat even when the erased events were the newest.
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
                    existing[str(ev.idempotency_key)] = replace(ev, duplicate=True)
        head = self.last_position(conn)
        heads = self._heads_cached(conn, head, {n.stream for n in new})
        position = max(head, after)
        now = to_iso(self.clock())
        rows_out: list[tuple[Any, ...]] = []
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
            head = heads.get(n.stream, 0)
            if n.expected_seq is not None and n.expected_seq != head:
                raise ConcurrencyError(n.stream, n.expected_seq, f"stream is at {head}")
            position += 1
            heads[n.stream] = seq = head + 1
            payload_cls = type(n.payload)
            stored = StoredEvent(
                position=position,
                event_id=new_event_id(),
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
            try:
                rows_out.append(_row(stored))
            except (TypeError, ValueError) as e:  # a payload field JSON cannot hold
                raise InvalidInputError(f"{payload_cls.TYPE} payload is not JSON: {e}") from e
            if n.idempotency_key:
                seen_keys[n.idempotency_key] = stored
            result.append(stored)
        if rows_out:
            try:
                # A plain DB-API executemany of tuples: Core's per-row parameter
                # processing cost about half of a batched append, and its
                # per-statement overhead most of a one-event append.
                rawexec.run_many(conn, _INSERT, rows_out)
            except UnicodeEncodeError as e:  # a lone surrogate in a payload or a name
                raise InvalidInputError(f"event text is not valid Unicode: {e}") from e
            except exc.IntegrityError as e:
                # Impossible under BEGIN IMMEDIATE unless a caller bypassed the
                # write transaction: report it as the conflict it is.
                raise ConcurrencyError(str(rows_out[0][2]), None, str(e.orig)) from e
            self._remember_heads(position, heads)
        return result

    def _heads_cached(self, conn: Connection, position: int, streams: set[str]) -> dict[str, int]:
        """Stream heads, from memory when nothing was appended since our last append.

        The cache is trusted only while the log's head is the position this
        instance itself wrote last (read inside the write lock): any append by
        another process or instance moves the head and empties the cache. If
        the transaction later rolls back, the head it cached was never written,
        so the cache cannot match and is dropped on the next append.
        """
        with self._cache_lock:
            if self._cache_position == position:
                cached = self._head_cache
                missing = {s for s in streams if s not in cached}
                known = {s: cached[s] for s in streams if s in cached}
            else:
                self._head_cache = {}
                missing, known = streams, {}
        if missing:
            known.update(self._heads(conn, missing))
        return known

    def _remember_heads(self, position: int, heads: dict[str, int]) -> None:
        with self._cache_lock:
            if len(self._head_cache) > 50_000:
                self._head_cache = {}
            self._head_cache.update(heads)
            self._cache_position = position

    def forget_cache(self) -> None:
        with self._cache_lock:
            self._head_cache = {}
            self._cache_position = -1

    @staticmethod
    def _heads(conn: Connection, streams: set[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        ordered = sorted(streams)
        for i in range(0, len(ordered), 500):
            # Driver-level: a capture to a session this instance has not
            # written since another writer appended asks this, and the Core
            # select cost several times the statement to build.
            marks, chunk = in_list(ordered[i : i + 500])
            sql = f"SELECT stream, max(seq) FROM events WHERE stream IN ({marks}) GROUP BY stream"
            out.update({str(s): int(m) for s, m in rawexec.rows(conn, sql, chunk)})
        return out

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
        # Plain SQL and positional rows: a replay reads every event through
        # here, and Core's statement compilation and named row access cost
        # more than reading and decoding the row itself.
        conds: list[str] = ["position > ?"]
        params: list[Any] = [after]
        if until is not None:
            conds.append("position <= ?")
            params.append(until)
        if types is not None:
            names = list(types)
            if not names:
                return []
            conds.append(f"type IN ({', '.join('?' for _ in names)})")
            params.extend(names)
        if user_id is not None:
            conds.append("user_id = ?")
            params.append(user_id)
        sql = f"SELECT {_SELECT} FROM events WHERE {' AND '.join(conds)} ORDER BY position"
        if limit is not None:
            sql += f" {limit_sql(limit)}"
        rows = driver_rows(conn, driver_sql(conn, sql), tuple(params))
        decode = self._decode
        return [decode(r) for r in rows]

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
        # On the driver: every append asks this first (rawexec explains why).
        return int(rawexec.scalar(conn, _HEAD))

    @staticmethod
    def prefetch_head(conn: Connection) -> None:
        """An append is coming in this write transaction: on PostgreSQL its
        ``last_position`` read goes to the server with the transaction's
        first round trip (memstore.db.pgbatch)."""
        rawexec.prefetch(conn, _HEAD, reads=("events",))

    def _decode(self, r: Any) -> StoredEvent:
        """A row of ``_COLUMNS`` (in that order) as a StoredEvent."""
        payload = self.registry.decode(r[4], int(r[5]), _loads(r[7]))
        # A rebuild decodes every event, and a frozen dataclass's __init__
        # (one object.__setattr__ per field) cost about as much as the JSON
        # decode. Filling the instance dict directly gives the same object
        # (tests/events/test_eventlog.py compares it with the __init__ one).
        # The row's columns are the first fields, in order; then the few that
        # differ from the column (and "duplicate") are set over them, in
        # place, so the dict's key order is the fields' order.
        ev: StoredEvent = _new_object(StoredEvent)
        d = ev.__dict__
        d.update(zip(_COLUMN_FIELDS, r, strict=True))
        d["position"] = int(r[0])
        d["seq"] = int(r[3])
        d["version"] = payload.VERSION
        d["payload"] = payload
        d["duplicate"] = False
        return ev
