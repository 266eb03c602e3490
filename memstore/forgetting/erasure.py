"""Erasure: the one exception to "events are immutable".

Forgetting a user physically deletes that user's events, rebuilds every
projection from what is left (so no derived row can survive its source),
drops the user's vectors and the cached embeddings of texts no one else has,
merges FTS5 segments (deleted rows otherwise linger in old segments),
appends a content-free tombstone and a pending-compaction marker in the same
transaction, and finally VACUUMs and truncates the WAL so no page of the file
still holds the erased bytes (memstore/db/compaction.py: the marker makes
that last step survive a crash and a reader that is in the way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, text

from memstore.db import backend
from memstore.db.compaction import mark_pending
from memstore.db.schema import embedding_cache, events, l1_memories
from memstore.derive.messages.events import UserErased
from memstore.embeddings import content_hash
from memstore.errors import NotFoundError
from memstore.events.log import NewEvent
from memstore.kernel import Batch, Hooks, Kernel
from memstore.vectors import spaces
from memstore.vectors.indexer import context_hashes


@dataclass(frozen=True)
class ErasureReport:
    """What an erasure did. ``compacted`` is False while the erased bytes may
    still be in the database's files (``detail`` says why), on every backend.
    On SQLite the store finishes the job on its next open, close or write. On
    PostgreSQL a plain VACUUM leaves the dead rows' bytes in the data files
    until their space is reused: only ``vacuum_full=True`` (VACUUM FULL, which
    rewrites every table under an exclusive lock) makes it True."""

    user_id: str
    events_removed: int
    embeddings_removed: int
    tombstone_position: int
    compacted: bool = True
    detail: str = ""


def _user_hashes(conn: Connection, user_id: str) -> set[str]:
    hashes = {
        content_hash(r[0])
        for r in conn.execute(
            text("SELECT text FROM l0_messages WHERE user_id = :u"), {"u": user_id}
        )
    }
    hashes |= {
        r[0]
        for r in conn.execute(
            text("SELECT content_hash FROM l1_memories WHERE user_id = :u"), {"u": user_id}
        )
    }
    return hashes | context_hashes(conn, user_id)


def _shared_hashes(conn: Connection, hashes: set[str]) -> set[str]:
    """Those of ``hashes`` the embedding cache holds and another row still
    uses (their cached vectors stay)."""
    ordered = sorted(hashes)
    cached: set[str] = set()
    for i in range(0, len(ordered), 500):
        cached |= {
            str(r[0])
            for r in conn.execute(
                select(embedding_cache.c.content_hash).where(
                    embedding_cache.c.content_hash.in_(ordered[i : i + 500])
                )
            )
        }
    if not cached:
        return set()  # a file from after 0013 caches no message vectors
    # l0_messages keeps no hash column (migration 0019): its texts are hashed
    # here; the look-up by hash scanned the table just the same.
    shared = {
        h
        for (t,) in conn.execute(text("SELECT text FROM l0_messages"))
        if (h := content_hash(t)) in cached
    }
    left = sorted(cached - shared)
    for i in range(0, len(left), 500):
        shared |= {
            str(r[0])
            for r in conn.execute(
                select(l1_memories.c.content_hash)
                .where(l1_memories.c.content_hash.in_(left[i : i + 500]))
                .distinct()
            )
        }
    return shared


def _drop_cached(conn: Connection, hashes: set[str]) -> int:
    """Delete the cached embeddings of ``hashes`` no remaining row uses."""
    dropped = sorted(hashes - _shared_hashes(conn, hashes))
    gone = 0
    for i in range(0, len(dropped), 500):
        gone += (
            conn.execute(
                embedding_cache.delete().where(
                    embedding_cache.c.content_hash.in_(dropped[i : i + 500])
                )
            ).rowcount
            or 0
        )
    return gone


def rebuild_after_delete(
    kernel: Kernel,
    conn: Connection,
    before: dict[str, dict[Any, int]],
    hashes: Callable[[Connection], set[str]],
    *,
    keep: Callable[[str, Any], bool] = lambda _kind, _key: True,
) -> int:
    """The part every erasure shares, once its events are deleted or rewritten:
    replay every projection from what is left (no derived row can outlive its
    source), move the surviving vectors to their rows' new ids in fresh vec0
    tables (no bytes of erased vectors stay in vec0 chunks, nothing is
    re-embedded; the new epoch drops every in-memory copy), drop cached
    embeddings of erased texts, and merge FTS5 segments (deleted rows
    otherwise linger in old ones). ``before``: ``spaces.natural_ids`` per
    kind, read before the change; ``keep(kind, key)`` False drops a surviving
    row's vector too; ``hashes``: the cache keys of what went, asked once the
    projections are rebuilt. Returns the vectors and cached embeddings removed."""
    kernel.log.forget_cache()
    kernel.projections.rebuild(conn)
    gone = 0
    for kind, old_ids in before.items():
        new_ids = spaces.natural_ids(conn, kind, without_user="")
        moved = {
            old: new_ids[key] for key, old in old_ids.items() if key in new_ids and keep(kind, key)
        }
        gone += spaces.carry_over(conn, kind, moved)
    gone += _drop_cached(conn, hashes(conn))
    for fts in ("l0_fts", "l1_fts"):
        backend.of(conn).fts_optimize(conn, fts)
    return gone


def erase_user(
    kernel: Kernel,
    user_id: str,
    *,
    reason: str = "request",
    wait_s: float = 10.0,
    vacuum_full: bool = False,
) -> ErasureReport:
    """Erase ``user_id``; waits up to ``wait_s`` seconds for readers of older
    snapshots before reporting the bytes as not yet gone. ``vacuum_full``:
    on PostgreSQL rewrite the tables (``VACUUM FULL``) instead of ``VACUUM``."""
    removed = gone = 0

    def build(conn: Connection) -> Batch:
        nonlocal removed, gone
        if (
            conn.execute(events.select().where(events.c.user_id == user_id).limit(1)).first()
            is None
        ):
            raise NotFoundError(f"user {user_id!r} has no data: nothing to erase")
        hashes = _user_hashes(conn, user_id)
        head = kernel.log.last_position(conn)
        for purge in kernel.erase_hooks:  # the pipeline's queue, locks and timers
            purge(conn, user_id)
        # Row ids shift, so the other users' vectors move to their rows' new ids.
        before = {k: spaces.natural_ids(conn, k, without_user=user_id) for k in spaces.KINDS}
        removed = conn.execute(events.delete().where(events.c.user_id == user_id)).rowcount or 0
        gone = rebuild_after_delete(kernel, conn, before, lambda _c: hashes)
        tombstone = UserErased(erased_user_id=user_id, events_removed=int(removed), reason=reason)
        return Batch(
            [NewEvent("erasure", tombstone)],
            after=head,
            then=lambda c, stored: mark_pending(c, stored[0].position),
        )

    # In-transaction hooks only: nothing else runs between the commit and the
    # compaction below (a crash there must leave the marker, not half a job).
    only_txn = Hooks(in_transaction=kernel.hooks.in_transaction)
    stored = kernel.append_if(build, hooks=only_txn, exclusive=True)
    result = kernel.compactor.run(wait_s, full=vacuum_full)
    return ErasureReport(
        user_id, int(removed), gone, stored[0].position, result.bytes_gone, result.detail
    )
