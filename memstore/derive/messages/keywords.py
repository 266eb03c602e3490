"""The keyword rows of stored messages: their FTS5 row, repeated terms and
their user's BM25 totals, written with the message or a moment later.

What BM25 reads of a message (memstore.search.bm25) is three writes beside
its ``l0_messages`` row: the ``l0_fts`` row, an ``l0_term_repeats`` row when
a term repeats, and the user's message and token totals in
``l0_user_slots``. FTS5 also writes and merges a segment at every commit. On
a capture of chat text that was about a fifth of the call's CPU: the
statements, deriving the three full-text columns, and a COMMIT twice as
long (BENCHMARKS.md, "Idle capture").

On SQLite, while a background indexer runs, a capture therefore writes only
the message rows, and the indexer writes the keyword rows later, in id order,
many captures per transaction: it reads the waiting messages
(:func:`read_waiting`), derives their columns outside any transaction (three
quarters of the work: word roots of new words) and writes them in a short
write transaction (:func:`write_waiting`) if they are still the messages it
read, so captures never queue behind the derivation. ``l0_keyword_cursor.through`` is the
highest id indexed: every message up to it has its keyword rows, none after
it. Keyword search reads the messages after it and scores them from their
text with the same figures (memstore.search.tail), so a message is found the
moment its capture returns, ranked as it will be once indexed.

A rebuild, a catch-up and a capture without a background indexer index in
the same transaction as the rows (the projection's ``apply``); they first
index whatever an earlier process left waiting, so slots are still handed
out in order of each user's first message, as a replay of the log gives.
PostgreSQL keeps its ``tsvector`` rows inline and has no cursor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select

from memstore.db import rawexec
from memstore.db.schema import l0_user_slots
from memstore.db.sqlfn import in_list
from memstore.db.sqlfn import limit as limit_sql
from memstore.derive.messages.columns import labelled_text, message_columns
from memstore.errors import StorageError
from memstore.text import is_low_information

__all__ = [
    "BATCH",
    "SLOT_SHIFT",
    "KeywordRows",
    "Waiting",
    "fts_key",
    "index_waiting",
    "indexed_text",
    "last_message",
    "low_info",
    "read_waiting",
    "set_through",
    "slots",
    "write_waiting",
]

BATCH = 32
"""Messages per background write of keyword rows: about 1 ms of the write
lock, which captures of the same process wait for. Every capture slower than
the 99th percentile of eight capturing threads overlapped one of these
writes; with 64 a write held the lock 1.6 ms (2.2 ms under that load: the
indexer also waits for the interpreter lock while it holds it), and p99 was
3.6-4.7x p50, against 2.4-3.4x with 32 at the same throughput. The price:
the indexer falls further behind during such a burst (about 5,700 messages
waiting at its end instead of 2,000, indexed within a second after)."""

SLOT_SHIFT = 40
"""l0_messages ids stay below 2**40 (10**12 messages); slots below 2**23."""

_FTS_INSERT = "INSERT INTO l0_fts(rowid, text, cjk, stem) VALUES (?, ?, ?, ?)"
# Per-user BM25 statistics (memstore.search.bm25): messages and tokens.
_COUNT = "UPDATE l0_user_slots SET docs = docs + ?, tokens = tokens + ? WHERE user_id = ?"
_REPEATS = "INSERT INTO l0_term_repeats (key, repeats) VALUES (?, ?)"
_THROUGH = "SELECT through FROM l0_keyword_cursor"
_LAST = "SELECT max(id) FROM l0_messages"
# An upsert: a rebuild's clear puts the row back should it be missing.
_SET_THROUGH = (
    "INSERT INTO l0_keyword_cursor (id, through) VALUES (1, ?) "
    "ON CONFLICT (id) DO UPDATE SET through = excluded.through"
)
# Forced onto the primary key (the waiting messages are the last ids).
_WAITING = "SELECT id, user_id, text, speaker FROM l0_messages WHERE id > ? ORDER BY id "
_READ_AGAIN = (
    "SELECT id, user_id, text, speaker FROM l0_messages WHERE id > ? AND id <= ? ORDER BY id"
)
# Keys per lookup: one parameter each, well under SQLite's parameter limit.
_LOOKUP = 300


def fts_key(slot: int, message_row: int) -> int:
    """The l0_fts rowid of ``l0_messages.id == message_row`` of the user in ``slot``."""
    return (slot << SLOT_SHIFT) | message_row


def indexed_text(speaker: str | None, text: str) -> str:
    """A message's text as its keyword row and its low-information flag see it."""
    return labelled_text(speaker, text) if speaker else text


def low_info(indexed: str) -> int:
    """``l0_messages.low_info`` of a message whose keyword rows come later:
    :func:`message_columns`' flag, without deriving the full-text columns."""
    return int(is_low_information(indexed))


class KeywordRows:
    """The keyword rows of some messages, collected then written at once."""

    __slots__ = ("counts", "fts", "repeated")

    def __init__(self) -> None:
        self.fts: list[tuple[Any, ...]] = []
        self.repeated: list[tuple[int, str]] = []
        self.counts: dict[str, list[int]] = {}

    def add(self, user: str, key: int, indexed: str) -> int:
        """Add the rows of one message (``key``: its :func:`fts_key`);
        returns its low-information flag."""
        return self.add_derived(user, key, message_columns(indexed))

    def add_derived(self, user: str, key: int, columns: tuple[Any, ...]) -> int:
        """:meth:`add` with the message's ``message_columns`` derived already."""
        flag, latin, cjk, stem, length, repeats = columns
        self.fts.append((key, latin, cjk, stem))
        if repeats is not None:
            self.repeated.append((key, repeats))
        count = self.counts.get(user)
        if count is None:
            count = self.counts[user] = [0, 0]
        count[0] += 1
        count[1] += length
        return int(flag)

    def write(self, conn: Connection) -> None:
        # In rowid order: FTS5 writes out its pending terms whenever a rowid
        # is not above the last one, and users' keys interleave in log order.
        self.fts.sort(key=_first)
        rawexec.run_many(conn, _FTS_INSERT, self.fts)
        rawexec.run_many(conn, _REPEATS, self.repeated)
        rawexec.run_many(conn, _COUNT, [(d, t, u) for u, (d, t) in self.counts.items() if d])


def _first(row: tuple[Any, ...]) -> Any:
    return row[0]


_SLOT = "SELECT slot FROM l0_user_slots WHERE user_id = ?"


def prefetch_slots(conn: Connection, users: Sequence[str]) -> None:
    """``slots`` is coming for a capture of one user: on PostgreSQL its read
    goes with an earlier round trip (memstore.db.pgbatch)."""
    wanted = set(users)
    if len(wanted) == 1:
        rawexec.prefetch(conn, _SLOT, list(wanted), reads=("l0_user_slots",))


def slots(conn: Connection, users: Sequence[str]) -> dict[str, int]:
    """Each of ``users``' slot, new ones numbered in the order given (log order,
    so a rebuild hands out the same slots)."""
    wanted = list(dict.fromkeys(users))
    out: dict[str, int] = {}
    if len(wanted) == 1:
        # A capture: a plain statement is cheaper than an IN list to compile.
        slot = rawexec.scalar(conn, _SLOT, wanted[:1])
        if slot is not None:
            out[wanted[0]] = int(slot)
    else:
        # A replay batch holds many users: one statement per _LOOKUP of them.
        for i in range(0, len(wanted), _LOOKUP):
            marks, chunk = in_list(wanted[i : i + _LOOKUP])
            sql = f"SELECT user_id, slot FROM l0_user_slots WHERE user_id IN ({marks})"
            out.update((str(u), int(n)) for u, n in rawexec.rows(conn, sql, chunk))
    new = [u for u in wanted if u not in out]
    if new:
        top = int(
            conn.execute(select(func.coalesce(func.max(l0_user_slots.c.slot), 0))).scalar_one()
        )
        given = {u: top + i for i, u in enumerate(new, start=1)}
        conn.execute(l0_user_slots.insert(), [{"user_id": u, "slot": n} for u, n in given.items()])
        out.update(given)
    return out


def last_message(conn: Connection) -> int:
    """The highest ``l0_messages`` id (0 if none)."""
    return int(rawexec.scalar(conn, _LAST) or 0)


def through(conn: Connection) -> int:
    """The highest message id with its keyword rows written."""
    got = rawexec.scalar(conn, _THROUGH)
    if got is None:
        raise missing_cursor()
    return int(got)


def missing_cursor() -> StorageError:
    return StorageError(
        "l0_keyword_cursor has no row, so which messages have keyword rows is unknown; "
        "run `memstore projections rebuild` to rebuild them from the log"
    )


def set_through(conn: Connection, last_id: int) -> None:
    rawexec.run(conn, _SET_THROUGH, (last_id,))


@dataclass(frozen=True, slots=True)
class Waiting:
    """Messages after the cursor as one read found them (``rows``: id, user,
    text, speaker), and the cursor then (``after``)."""

    after: int
    rows: tuple[tuple[Any, ...], ...]

    def derive(self) -> list[tuple[Any, ...]]:
        """Each message's ``message_columns``, derived outside any transaction."""
        return [message_columns(indexed_text(r[3], r[2])) for r in self.rows]


def read_waiting(conn: Connection, limit: int) -> Waiting | None:
    """Up to ``limit`` messages after the cursor, in id order (None: none wait)."""
    after = through(conn)
    rows = rawexec.rows(conn, _WAITING + limit_sql(limit), (after,))
    return Waiting(after, tuple(tuple(r) for r in rows)) if rows else None


def write_waiting(conn: Connection, waiting: Waiting, columns: Sequence[tuple[Any, ...]]) -> int:
    """In the caller's write transaction: write the keyword rows of ``waiting``
    from their ``columns`` (:meth:`Waiting.derive`) and move the cursor past
    them; returns how many. Nothing is written (0) unless the cursor and
    those messages are still as read: meanwhile an inline capture may have
    indexed them, or a rebuild after an erasure given their ids to other
    messages, whose rows must never carry the erased text."""
    last = int(waiting.rows[-1][0])
    if through(conn) != waiting.after:
        return 0
    now = rawexec.rows(conn, _READ_AGAIN, (waiting.after, last))
    if len(now) != len(waiting.rows) or any(
        tuple(a) != b for a, b in zip(now, waiting.rows, strict=True)
    ):
        return 0
    given = slots(conn, [str(r[1]) for r in waiting.rows])
    out = KeywordRows()
    for r, derived in zip(waiting.rows, columns, strict=True):
        out.add_derived(str(r[1]), fts_key(given[str(r[1])], int(r[0])), derived)
    out.write(conn)
    set_through(conn, last)
    return len(waiting.rows)


def index_waiting(conn: Connection, limit: int = 2000) -> int:
    """Write the keyword rows of up to ``limit`` messages after the cursor,
    in id order, and move the cursor past them; returns how many (0: none
    waiting). Runs in the caller's write transaction (SQLite only)."""
    after = through(conn)
    waiting = rawexec.rows(conn, _WAITING + limit_sql(limit), (after,))
    if not waiting:
        return 0
    given = slots(conn, [str(r[1]) for r in waiting])
    out = KeywordRows()
    for row_id, user, text, speaker in waiting:
        out.add(user, fts_key(given[user], int(row_id)), indexed_text(speaker, text))
    out.write(conn)
    set_through(conn, int(waiting[-1][0]))
    return len(waiting)
