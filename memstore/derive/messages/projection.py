"""The L0 projection: ``l0_messages`` rows and their keyword rows, applied inline.

``l0_fts`` is contentless (``content=''``): it holds the index only, since
the text lives in ``l0_messages`` and search reads it from there. Its rowids
are :func:`~memstore.derive.messages.keywords.fts_key` values, one
contiguous range per user, so a keyword match reads the user's own postings
rather than every user's (:func:`user_fts_range`). A live capture on SQLite
may leave the keyword rows to the background indexer
(memstore.derive.messages.keywords); a replay always writes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import Connection, delete, text
from sqlalchemy.exc import IntegrityError

from memstore.db import backend, rawexec
from memstore.db.schema import l0_messages, l0_term_repeats, l0_user_slots
from memstore.db.sqlfn import driver_sql
from memstore.derive.messages import checked, keywords
from memstore.derive.messages.events import MessagesCaptured
from memstore.derive.messages.keywords import (
    SLOT_SHIFT,
    KeywordRows,
    fts_key,
    indexed_text,
    low_info,
)
from memstore.events.log import StoredEvent
from memstore.projections.base import Projection

_INSERT = (
    "INSERT INTO l0_messages (id, user_id, agent_id, session_id, message_id, role, text, "
    "occurred_at, position, speaker, low_info) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# Keys per lookup: 3 parameters each, well under SQLite's parameter limit.
_LOOKUP = 300
_MAX_ID = "SELECT coalesce(max(id), 0) FROM l0_messages"
# With the keyword cursor (SQLite), in one statement.
_MAX_ID_THROUGH = (
    "SELECT coalesce(max(id), 0), (SELECT through FROM l0_keyword_cursor) FROM l0_messages"
)
_READS = ("l0_messages", "l0_keyword_cursor")
_SLOT_OF = text("SELECT slot FROM l0_user_slots WHERE user_id = :u")


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


def user_fts_range(conn: Connection, user_id: str) -> tuple[int, int] | None:
    """``(lo, hi)``: the l0_fts rowids ``user_id``'s messages can have, or
    ``None`` if the user has none indexed. ``rowid - lo`` is the l0_messages id."""
    slot = conn.execute(_SLOT_OF, {"u": user_id}).scalar()
    if slot is None:
        return None
    lo = fts_key(int(slot), 0)
    return lo, lo + (1 << SLOT_SHIFT) - 1


DEFER_AT_MOST = 64
"""Messages in one append, at most, whose keyword rows may be left to the indexer."""


def _messages(events: Sequence[StoredEvent]) -> int:
    return sum(
        len(ev.payload.messages) for ev in events if isinstance(ev.payload, MessagesCaptured)
    )


class _Batch:
    """What a batch of captures writes: l0_messages rows and, unless they
    are left to the keyword indexer, their keyword rows."""

    __slots__ = ("keywords", "rows")

    def __init__(self, keywords: KeywordRows | None) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.keywords = keywords


def _rows(
    events: Sequence[StoredEvent],
    seen: set[tuple[str, str, str]] | None,
    slots: dict[str, int] | None,
    next_id: int,
) -> _Batch:
    """The rows of ``events``, ids from ``next_id + 1``, skipping the keys in
    ``seen`` (and repeats within ``events``); ``None``: every message, a key
    stored twice left to the unique index to report. ``slots`` None: no
    keyword rows (the keyword indexer writes them)."""
    out = _Batch(None if slots is None else KeywordRows())
    keywords = out.keywords
    # Bound methods and locals: this loop runs once per message replayed.
    add_row = out.rows.append
    for ev in events:
        p = ev.payload
        assert isinstance(p, MessagesCaptured)
        user, session, agent, position = ev.user_id, p.session_id, p.agent_id, ev.position
        slot_key = 0 if slots is None else fts_key(slots[user], 0)
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
            indexed = indexed_text(speaker, text_)
            if keywords is None:
                flag = low_info(indexed)
            else:
                flag = keywords.add(user, slot_key | next_id, indexed)
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
                    speaker,
                    flag,
                )
            )
    return out


def _insert(conn: Connection, batch: _Batch) -> None:
    # Bare executemany on the driver (memstore.db.rawexec): SQLAlchemy's
    # per-row parameter processing cost more than the inserts on replay, and
    # its per-statement overhead more than the statements on a capture.
    rawexec.run_many(conn, _INSERT, batch.rows)
    if batch.keywords is not None:
        batch.keywords.write(conn)


def _insert_guarded(
    conn: Connection,
    events: Sequence[StoredEvent],
    batch: _Batch,
    slots: dict[str, int] | None,
    next_id: int,
) -> _Batch | None:
    """Insert ``batch``; should a key be stored already, insert the rows of
    ``events`` without the stored keys instead. The rows inserted, or None
    if every key was stored."""
    # A savepoint in plain SQL: SQLAlchemy's begin_nested() cost about
    # 0.25 ms CPU per capture to open and release, several times the
    # statements it guards.
    rawexec.run(conn, "SAVEPOINT l0_rows")
    try:
        _insert(conn, batch)
        rawexec.flush(conn)  # PostgreSQL: the duplicate is found here, not later
    except IntegrityError:
        rawexec.run(conn, "ROLLBACK TO SAVEPOINT l0_rows")
        rawexec.run(conn, "RELEASE SAVEPOINT l0_rows")
        batch = _rows(events, _known(conn, events), slots, next_id)
        if not batch.rows:
            return None
        _insert(conn, batch)
    else:
        rawexec.run(conn, "RELEASE SAVEPOINT l0_rows")
    return batch


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

    def __init__(self) -> None:
        # Set while a background indexer runs in this process (SQLite):
        # captures then leave their keyword rows to it (memstore.derive.messages.keywords).
        self.defer_keywords = False

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        self._apply(conn, events, defer=False)

    def apply_live(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        # A large append (an import, many captures committed together) writes
        # its keyword rows at once: FTS5 indexes a big batch cheaply per
        # message, and search would otherwise score all of it from its text
        # until the indexer's next pass.
        defer = self.defer_keywords and _messages(events) <= DEFER_AT_MOST
        self._apply(conn, events, defer=defer)

    def read_ahead(self, conn: Connection, user_ids: Sequence[str]) -> None:
        # The next id and the user's slot: what ``_apply`` reads first.
        fts5 = backend.of(conn).keyword_index == "fts5"
        rawexec.prefetch(conn, _MAX_ID_THROUGH if fts5 else _MAX_ID, reads=_READS)
        keywords.prefetch_slots(conn, user_ids)

    def _apply(self, conn: Connection, events: Sequence[StoredEvent], *, defer: bool) -> None:
        # Driver-level: once per capture, and the Core select cost ~5x the
        # statement to build (0.17 against 0.03 ms CPU).
        cursor = backend.of(conn).keyword_index == "fts5"
        if not cursor:
            next_id, defer = int(rawexec.scalar(conn, _MAX_ID)), False
        else:
            top, through = rawexec.first(conn, _MAX_ID_THROUGH)
            next_id = int(top)
            if through is None:
                raise keywords.missing_cursor()
            if not defer and through != next_id:
                # Messages another capture left to the indexer come first,
                # so their users' slots go in order of first message.
                while keywords.index_waiting(conn):
                    pass
        slots = None if defer else keywords.slots(conn, [ev.user_id for ev in events])
        # Capture never appends a known id, but a log can hold one anyway (an
        # event appended directly, an older version): skip it rather than let
        # the FTS row and the message row disagree. The unique index finds
        # such an id, stored before or twice in this batch; only then are the
        # batch's keys looked up and collected, so a replay pays neither a
        # lookup per batch nor a key per message.
        batch = _rows(events, None, slots, next_id)
        if not batch.rows:
            return
        if checked.all_new(conn, ((r[1], r[3], r[4]) for r in batch.rows)):
            # The capture read these keys absent in this transaction: no
            # duplicate can reach the unique index, so no guard (on
            # PostgreSQL, a round trip) is needed.
            _insert(conn, batch)
        else:
            guarded = _insert_guarded(conn, events, batch, slots, next_id)
            if guarded is None:
                return
            batch = guarded
        if cursor and not defer:
            keywords.set_through(conn, int(batch.rows[-1][0]))

    def clear(self, conn: Connection) -> None:
        backend.of(conn).fts_clear(conn, "l0_fts", contentless=True)
        conn.execute(delete(l0_messages))
        conn.execute(delete(l0_user_slots))
        conn.execute(delete(l0_term_repeats))
        if backend.of(conn).keyword_index == "fts5":
            keywords.set_through(conn, 0)
        # Vectors stay: replay assigns ids in log order, so each id names the
        # same message again and vector search works right after a rebuild
        # (erasure, which renumbers, moves them: spaces.carry_over).
