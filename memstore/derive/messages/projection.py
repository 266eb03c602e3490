"""The L0 projection: ``l0_messages`` rows and their FTS5 index, applied inline.

``l0_fts`` is contentless (``content=''``): it holds the index only, since
the text lives in ``l0_messages`` and search reads it from there. Its rowids
are :func:`fts_key` values, one contiguous range per user, so a keyword
match reads the user's own postings rather than every user's
(:func:`user_fts_range`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import Connection, delete, func, select, text
from sqlalchemy.exc import IntegrityError

from memstore.db import backend, rawexec
from memstore.db.schema import l0_messages, l0_term_repeats, l0_user_slots
from memstore.db.sqlfn import driver_sql
from memstore.derive.messages.columns import labelled_text, message_columns
from memstore.derive.messages.events import MessagesCaptured
from memstore.events.log import StoredEvent
from memstore.projections.base import Projection

_FTS_INSERT = "INSERT INTO l0_fts(rowid, text, cjk, stem) VALUES (?, ?, ?, ?)"
_INSERT = (
    "INSERT INTO l0_messages (id, user_id, agent_id, session_id, message_id, role, text, "
    "occurred_at, position, speaker, low_info) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# Per-user BM25 statistics (memstore.search.bm25): messages and tokens.
_COUNT = "UPDATE l0_user_slots SET docs = docs + ?, tokens = tokens + ? WHERE user_id = ?"
_REPEATS = "INSERT INTO l0_term_repeats (key, repeats) VALUES (?, ?)"
# Keys per lookup: 3 parameters each, well under SQLite's parameter limit.
_LOOKUP = 300


def _known(conn: Connection, events: Sequence[StoredEvent]) -> set[tuple[str, str, str]]:
    """The (user, session, message id) keys of ``events`` already stored,
    found through the unique index in a few statements, not one per event."""
    keys = sorted(
        {
            (ev.user_id, ev.payload.session_id, m["id"])
            for ev in events
            if isinstance(ev.payload, MessagesCaptured)
            for m in ev.payload.messages
        }
    )
    found: set[tuple[str, str, str]] = set()
    for i in range(0, len(keys), _LOOKUP):
        chunk = keys[i : i + _LOOKUP]
        values = ",".join("(?, ?, ?)" for _ in chunk)
        found.update(
            (str(u), str(s), str(m))
            for u, s, m in conn.exec_driver_sql(
                driver_sql(
                    conn,
                    f"WITH k(u, s, m) AS (VALUES {values}) "
                    "SELECT l.user_id, l.session_id, l.message_id FROM k JOIN l0_messages l "
                    "ON l.user_id = k.u AND l.session_id = k.s AND l.message_id = k.m",
                ),
                tuple(x for key in chunk for x in key),
            )
        )
    return found


_MAX_ID = "SELECT coalesce(max(id), 0) FROM l0_messages"
_SLOT_OF = text("SELECT slot FROM l0_user_slots WHERE user_id = :u")

SLOT_SHIFT = 40
"""l0_messages ids stay below 2**40 (10**12 messages); slots below 2**23."""


def fts_key(slot: int, message_row: int) -> int:
    """The l0_fts rowid of ``l0_messages.id == message_row`` of the user in ``slot``."""
    return (slot << SLOT_SHIFT) | message_row


def user_fts_range(conn: Connection, user_id: str) -> tuple[int, int] | None:
    """``(lo, hi)``: the l0_fts rowids ``user_id``'s messages can have, or
    ``None`` if the user has none. ``rowid - lo`` is the l0_messages id."""
    slot = conn.execute(_SLOT_OF, {"u": user_id}).scalar()
    if slot is None:
        return None
    lo = fts_key(int(slot), 0)
    return lo, lo + (1 << SLOT_SHIFT) - 1


def _slots(conn: Connection, users: Sequence[str]) -> dict[str, int]:
    """Each of ``users``' slot, new ones numbered in the order given (log order,
    so a rebuild hands out the same slots)."""
    wanted = list(dict.fromkeys(users))
    out: dict[str, int] = {}
    if len(wanted) == 1:
        # A capture: a plain statement is cheaper than an IN list to compile.
        slot = rawexec.scalar(conn, "SELECT slot FROM l0_user_slots WHERE user_id = ?", wanted[:1])
        if slot is not None:
            out[wanted[0]] = int(slot)
    else:
        # A replay batch holds many users: one statement per _LOOKUP of them.
        for i in range(0, len(wanted), _LOOKUP):
            chunk = wanted[i : i + _LOOKUP]
            marks = ", ".join("?" for _ in chunk)
            sql = f"SELECT user_id, slot FROM l0_user_slots WHERE user_id IN ({marks})"
            out.update(
                (str(u), int(n))
                for u, n in conn.exec_driver_sql(driver_sql(conn, sql), tuple(chunk))
            )
    new = [u for u in wanted if u not in out]
    if new:
        top = int(
            conn.execute(select(func.coalesce(func.max(l0_user_slots.c.slot), 0))).scalar_one()
        )
        given = {u: top + i for i, u in enumerate(new, start=1)}
        conn.execute(l0_user_slots.insert(), [{"user_id": u, "slot": n} for u, n in given.items()])
        out.update(given)
    return out


class _Batch:
    """What a batch of captures writes: l0_messages rows, l0_fts rows, the
    l0_term_repeats rows and each user's (messages, tokens) to add."""

    __slots__ = ("counts", "fts", "repeated", "rows")

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.fts: list[tuple[Any, ...]] = []
        self.repeated: list[tuple[int, str]] = []
        self.counts: dict[str, list[int]] = {}


def _rows(
    events: Sequence[StoredEvent],
    seen: set[tuple[str, str, str]] | None,
    slots: dict[str, int],
    next_id: int,
) -> _Batch:
    """The rows of ``events``, ids from ``next_id + 1``, skipping the keys in
    ``seen`` (and repeats within ``events``); ``None``: every message, a key
    stored twice left to the unique index to report."""
    out = _Batch()
    # Bound methods and locals: this loop runs once per message replayed.
    add_row, add_fts, add_repeat = out.rows.append, out.fts.append, out.repeated.append
    for ev in events:
        p = ev.payload
        assert isinstance(p, MessagesCaptured)
        user, session, agent, position = ev.user_id, p.session_id, p.agent_id, ev.position
        slot_key = fts_key(slots[user], 0)
        count = out.counts.setdefault(user, [0, 0])
        for m in p.messages:
            mid = m["id"]
            if seen is not None:
                key = (user, session, mid)
                if key in seen:
                    continue
                seen.add(key)
            next_id += 1
            text_ = m["text"]
            # The speaker's name is indexed with the words (labelled_text).
            speaker = m.get("name")
            indexed = labelled_text(speaker, text_) if speaker else text_
            low_info, latin, cjk, stem, length, repeats = message_columns(indexed)
            add_row(
                (
                    next_id,
                    user,
                    agent,
                    session,
                    mid,
                    m["role"],
                    text_,
                    m["occurred_at"],
                    position,
                    m.get("name"),
                    low_info,
                )
            )
            fkey = slot_key | next_id
            add_fts((fkey, latin, cjk, stem))
            if repeats is not None:
                add_repeat((fkey, repeats))
            count[0] += 1
            count[1] += length
    return out


def _insert(conn: Connection, batch: _Batch) -> None:
    # Bare executemany on the driver (memstore.db.rawexec): SQLAlchemy's
    # per-row parameter processing cost more than the inserts on replay, and
    # its per-statement overhead more than the statements on a capture.
    rawexec.run_many(conn, _INSERT, batch.rows)
    # In rowid order: FTS5 writes out its pending terms whenever a rowid is
    # not above the last one, and users' keys interleave in log order.
    batch.fts.sort(key=_first)
    rawexec.run_many(conn, _FTS_INSERT, batch.fts)
    rawexec.run_many(conn, _REPEATS, batch.repeated)
    rawexec.run_many(conn, _COUNT, [(d, t, u) for u, (d, t) in batch.counts.items() if d])


def _first(row: tuple[Any, ...]) -> Any:
    return row[0]


class L0Projection(Projection):
    name: ClassVar[str] = "l0_messages"
    version: ClassVar[int] = 3  # 2: speaker column; 3: l0_fts without Latin diacritics
    handles: ClassVar[frozenset[str] | None] = frozenset({MessagesCaptured.TYPE})
    tables = (l0_messages, l0_user_slots, l0_term_repeats)
    # Read by search and the indexer, never by ``apply``.
    replay_deferred_indexes = (
        "ix_l0_messages_user_id_session_id_position",
        "ix_l0_messages_user_id_occurred_at",
    )
    replay_fts_tables = ("l0_fts",)

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        # Driver-level: once per capture, and the Core select cost ~5x the
        # statement to build (0.17 against 0.03 ms CPU).
        next_id = int(rawexec.scalar(conn, _MAX_ID))
        slots = _slots(conn, [ev.user_id for ev in events])
        # Capture never appends a known id, but a log can hold one anyway (an
        # event appended directly, an older version): skip it rather than let
        # the FTS row and the message row disagree. The unique index finds
        # such an id, stored before or twice in this batch; only then are the
        # batch's keys looked up and collected, so a replay pays neither a
        # lookup per batch nor a key per message.
        batch = _rows(events, None, slots, next_id)
        if not batch.rows:
            return
        # A savepoint in plain SQL: SQLAlchemy's begin_nested() cost about
        # 0.25 ms CPU per capture to open and release, several times the
        # statements it guards.
        rawexec.run(conn, "SAVEPOINT l0_rows")
        try:
            _insert(conn, batch)
        except IntegrityError:
            rawexec.run(conn, "ROLLBACK TO SAVEPOINT l0_rows")
            rawexec.run(conn, "RELEASE SAVEPOINT l0_rows")
            batch = _rows(events, _known(conn, events), slots, next_id)
            if batch.rows:
                _insert(conn, batch)
        else:
            rawexec.run(conn, "RELEASE SAVEPOINT l0_rows")

    def clear(self, conn: Connection) -> None:
        backend.of(conn).fts_clear(conn, "l0_fts", contentless=True)
        conn.execute(delete(l0_messages))
        conn.execute(delete(l0_user_slots))
        conn.execute(delete(l0_term_repeats))
        # Vectors stay: replay assigns ids in log order, so each id names the
        # same message again and vector search works right after a rebuild
        # (erasure, which renumbers, moves them: spaces.carry_over).
