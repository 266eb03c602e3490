"""Message keys a capture found new, in the transaction that stores them.

A capture reads which of its message ids the session already has (in its
write transaction, with every other writer locked out) and appends only the
others. The L0 projection then need not guard its inserts against a
duplicate key with a savepoint: on PostgreSQL that guard is a round trip of
its own, to learn of the error where it can still be rolled back. Events
that reach the projection any other way (a direct append, a replay of an
older log) were checked by nobody and keep the guard.

What is noted here belongs to one transaction: the entry keeps the
transaction object it was made in, and is ignored (and replaced) in any
other, so a key checked in a transaction that rolled back vouches for
nothing later.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection

_KEY = "memstore.l0_checked"

Key = tuple[str, str, str]  # user, session, message id


def _entry(conn: Connection) -> set[Key] | None:
    tx = conn.get_transaction()
    if tx is None:
        return None
    got: tuple[Any, set[Key]] | None = conn.info.get(_KEY)
    if got is None or got[0] is not tx:
        return None
    return got[1]


def note_new(conn: Connection, user_id: str, session_id: str, ids: Iterable[str]) -> None:
    """``ids`` of this session were read absent from ``l0_messages`` in this
    transaction, after any earlier capture of it took its own."""
    tx = conn.get_transaction()
    if tx is None:  # no transaction to tie the keys to: vouch for nothing
        return
    keys = _entry(conn)
    if keys is None:
        keys = set()
        conn.info[_KEY] = (tx, keys)
    keys.update((user_id, session_id, i) for i in ids)


def all_new(conn: Connection, keys: Iterable[Key]) -> bool:
    """Whether every key was noted new in this transaction."""
    noted = _entry(conn)
    return noted is not None and all(k in noted for k in keys)


__all__ = ["Key", "all_new", "note_new"]
