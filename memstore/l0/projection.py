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

from memstore.db.schema import l0_messages, l0_term_repeats, l0_user_slots
from memstore.db.sqlfn import driver_sql
from memstore.embeddings import content_hash
from memstore.events.log import StoredEvent
from memstore.l0.events import MessagesCaptured
from memstore.projections.base import Projection
from memstore.text import document_columns, is_low_information, stem_text
from memstore.text.terms import document_stats

_FTS_INSERT = "INSERT INTO l0_fts(rowid, text, cjk, stem) VALUES (?, ?, ?, ?)"
_INSERT = (
    "INSERT INTO l0_messages (id, user_id, agent_id, session_id, message_id, role, text, "
    "occurred_at, position, content_hash, speaker, low_info) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
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
    # Point lookups: usually one user per call (a capture), and a plain
    # statement is cheaper to run than an expanding IN list to compile.
    out: dict[str, int] = {}
    for user in wanted:
        slot = conn.execute(_SLOT_OF, {"u": user}).scalar()
        if slot is not None:
            out[user] = int(slot)
    new = [u for u in wanted if u not in out]
    if new:
        top = int(
            conn.execute(select(func.coalesce(func.max(l0_user_slots.c.slot), 0))).scalar_one()
        )
        given = {u: top + i for i, u in enumerate(new, start=1)}
        conn.execute(l0_user_slots.insert(), [{"user_id": u, "slot": n} for u, n in given.items()])
        out.update(given)
    return out


class L0Projection(Projection):
    name: ClassVar[str] = "l0_messages"
    version: ClassVar[int] = 2  # 2: speaker column
    handles: ClassVar[frozenset[str] | None] = frozenset({MessagesCaptured.TYPE})
    tables = (l0_messages, l0_user_slots, l0_term_repeats)

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        next_id = int(
            conn.execute(select(func.coalesce(func.max(l0_messages.c.id), 0))).scalar_one()
        )
        # Capture never appends a known id, but a log can hold one anyway (an
        # event appended directly, an older version): skip it here rather than
        # let the FTS row and the message row disagree. One lookup per batch.
        seen = _known(conn, events)
        slots = _slots(conn, [ev.user_id for ev in events])
        rows: list[tuple[Any, ...]] = []
        fts: list[tuple[Any, ...]] = []
        repeated: list[tuple[int, str]] = []
        counts: dict[str, list[int]] = {}
        for ev in events:
            p = ev.payload
            assert isinstance(p, MessagesCaptured)
            for m in p.messages:
                key = (ev.user_id, p.session_id, m["id"])
                if key in seen:
                    continue
                seen.add(key)
                next_id += 1
                text_ = m["text"]
                rows.append(
                    (
                        next_id,
                        ev.user_id,
                        p.agent_id,
                        p.session_id,
                        m["id"],
                        m["role"],
                        text_,
                        m["occurred_at"],
                        ev.position,
                        content_hash(text_),
                        m.get("name"),
                        int(is_low_information(text_)),
                    )
                )
                latin, cjk = document_columns(text_)
                stem = stem_text(latin)
                fkey = fts_key(slots[ev.user_id], next_id)
                fts.append((fkey, latin, cjk, stem))
                length, repeats = document_stats(latin, cjk, stem)
                if repeats is not None:
                    repeated.append((fkey, repeats))
                count = counts.setdefault(ev.user_id, [0, 0])
                count[0] += 1
                count[1] += length
        if rows:
            # Bare executemany: SQLAlchemy's per-row parameter processing cost
            # more than the inserts on replay.
            conn.exec_driver_sql(driver_sql(conn, _INSERT), rows)
            conn.exec_driver_sql(driver_sql(conn, _FTS_INSERT), fts)
            if repeated:
                conn.exec_driver_sql(driver_sql(conn, _REPEATS), repeated)
            conn.exec_driver_sql(
                driver_sql(conn, _COUNT), [(d, t, u) for u, (d, t) in counts.items()]
            )

    def clear(self, conn: Connection) -> None:
        # A contentless FTS5 table cannot DELETE rows it has no content for;
        # 'delete-all' empties its index.
        if conn.dialect.name == "sqlite":
            conn.execute(text("INSERT INTO l0_fts(l0_fts) VALUES ('delete-all')"))
        else:
            conn.execute(text("DELETE FROM l0_fts"))
        conn.execute(delete(l0_messages))
        conn.execute(delete(l0_user_slots))
        conn.execute(delete(l0_term_repeats))
        # Vectors stay: replay assigns ids in log order, so each id names the
        # same message again and vector search works right after a rebuild
        # (erasure, which renumbers, moves them: spaces.carry_over).
