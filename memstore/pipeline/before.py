"""A session's pipeline state as it was before a capture's writes, plus the capture.

A capture decides in its own transaction whether the session reached its
extraction threshold (``PipelineService.on_captured``). Read after the
capture's rows are written, that answer costs PostgreSQL a round trip of its
own between the writes and the COMMIT. Read *before* the writes, it can go
to the server with the capture's first reads (the lock, the log's head, the
known message ids): the capture then adds what it writes itself — its
position, and its rounds — in Python, and the writes travel with the COMMIT.

The two answers are the same because everything the read depends on
changes only under the write lock the capture holds from its first
statement on: ``pipeline_pending`` and ``pipeline_sessions`` (this
projection), ``l1_cursors`` and ``active_generations`` (derivation events'
projections) are written by appends alone. Pending rounds are summed over
at most ``most`` captures (the largest threshold there is, as
``state.pending_reached`` does): if the rows before the capture reach
``most`` the threshold is reached either way, and otherwise they are all
counted and the capture's own rows add to them.

``expect`` is called by the capture before its first read (the pipeline
service's ``before_capture`` hook); the projection's ``apply_live`` reads
the state of each expected session before it writes (``settle``), and
``on_captured`` takes the answer from here (``reached``). What is noted
belongs to one transaction, like ``memstore.derive.messages.checked``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from memstore.db import rawexec
from memstore.db.sqlfn import limit
from memstore.derive.messages.events import MessagesCaptured
from memstore.events.log import StoredEvent

_KEY = "memstore.pipeline_before"

_ACTIVE = "COALESCE((SELECT g.generation FROM active_generations g WHERE g.user_id = ?), 0)"
_CURSOR = (
    "SELECT {col} FROM l1_cursors c WHERE c.user_id = ? AND c.session_id = ? "
    f"AND c.generation = {_ACTIVE}"
)
# One session's extraction count and pending rounds (of at most ``{limit}``
# captures that have any), whether or not it has a state row yet; the
# sessions of one batch of captures are read by one statement, each part
# numbered ``{i}``.
_BEFORE = f"""
SELECT {{i}}, COALESCE(({_CURSOR.format(col="c.runs")}), 0),
  (SELECT COALESCE(sum(r.rounds), 0) FROM (
     SELECT p.rounds FROM pipeline_pending p WHERE p.user_id = ? AND p.session_id = ?
       AND p.position > COALESCE(({_CURSOR.format(col="c.cursor_position")}), 0)
       AND p.rounds > 0 ORDER BY p.position {{limit}}) r)
"""
_READS = ("l1_cursors", "active_generations", "pipeline_pending")


@dataclass
class _Session:
    most: int
    group: _Group
    read: bool = False
    extractions: int = 0
    rounds: int = 0
    last_position: int = 0


@dataclass
class _Group:
    """The sessions one statement reads (those of one ``expect``)."""

    sql: str
    params: tuple[str, ...]
    keys: list[tuple[str, str]]


def _params(user_id: str, session_id: str) -> tuple[str, ...]:
    return (user_id, session_id, user_id, user_id, session_id, user_id, session_id, user_id)


def _noted(conn: Connection, create: bool = False) -> dict[tuple[str, str], _Session] | None:
    tx = conn.get_transaction()
    if tx is None:
        return None
    got: tuple[Any, dict[tuple[str, str], _Session]] | None = conn.info.get(_KEY)
    if got is not None and got[0] is tx:
        return got[1]
    if not create:
        return None
    sessions: dict[tuple[str, str], _Session] = {}
    conn.info[_KEY] = (tx, sessions)
    return sessions


def expect(conn: Connection, keys: Sequence[tuple[str, str]], most: int) -> None:
    """Captures of these (user, session) pairs will append in this
    transaction, whose writes have not begun: their states before them are
    to be read (one statement for the sessions not expected yet), on
    PostgreSQL with the next round trip."""
    sessions = _noted(conn, create=True)
    if sessions is None:
        return
    new = [k for k in dict.fromkeys(keys) if k not in sessions]
    if not new:
        return
    lim = limit(most)
    sql = " UNION ALL ".join(_BEFORE.format(i=i, limit=lim) for i in range(len(new)))
    params = tuple(p for u, s in new for p in _params(u, s))
    group = _Group(sql, params, new)
    for k in new:
        sessions[k] = _Session(most, group)
    rawexec.prefetch(conn, sql, params, reads=_READS)


def settle(conn: Connection, events: Sequence[StoredEvent]) -> None:
    """Before the pipeline-state projection writes ``events``: read the
    states of the expected sessions they capture into (each statement once
    per transaction), then add their positions and rounds (what
    ``PipelineStateProjection.apply`` writes for them)."""
    sessions = _noted(conn)
    if not sessions:
        return
    captures = [
        (s, ev)
        for ev in events
        if isinstance(ev.payload, MessagesCaptured)
        and (s := sessions.get((ev.user_id, ev.payload.session_id))) is not None
    ]
    for s, _ in captures:
        if not s.read:
            _read(conn, s.group, sessions)
    for s, ev in captures:
        assert isinstance(ev.payload, MessagesCaptured)
        s.rounds += [m.get("role") for m in ev.payload.messages].count("user")
        s.last_position = max(s.last_position, ev.position)


def _read(conn: Connection, group: _Group, sessions: dict[tuple[str, str], _Session]) -> None:
    # The whole statement as it was sent ahead (PostgreSQL answers from
    # that), for every session it names.
    for i, extractions, rounds in rawexec.rows(conn, group.sql, group.params):
        s = sessions[group.keys[int(i)]]
        s.extractions, s.rounds = int(extractions), int(rounds)
    for k in group.keys:
        sessions[k].read = True


def reached(
    conn: Connection, user_id: str, session_id: str, threshold: Callable[[int], int]
) -> tuple[int, bool] | None:
    """``state.pending_reached``'s answer from what ``settle`` noted: (the
    session's last capture position, whether its pending rounds reach
    ``threshold(extractions)``); None if nothing was noted for it (or the
    threshold exceeds what the read counted up to)."""
    sessions = _noted(conn)
    s = sessions.get((user_id, session_id)) if sessions else None
    if s is None or not s.read:
        return None
    need = threshold(s.extractions)
    if need > s.most:
        return None
    return s.last_position, s.rounds >= need


__all__ = ["expect", "reached", "settle"]
