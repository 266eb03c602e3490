"""Making an erasure physical, durably (SQLite: VACUUM, then truncate the WAL;
PostgreSQL: VACUUM; memstore.db.backend does each).

Deleting rows does not remove their bytes: old pages stay in the ``.db``
file and old frames in the ``-wal`` until the file is vacuumed and the WAL is
checkpointed and truncated. Both run after the erasure transaction commits,
so a crash in between, or a reader holding an old snapshot (the checkpoint
cannot copy frames past it), used to leave the erased content in the file
with nothing to finish the job.

The erasure transaction therefore writes a marker row (``erasure_compaction``,
no content in it). Whoever finds it — the erasure itself, ``Store.open``,
``Store.close``, the next write of a store that knows one is pending —
vacuums (once; the marker records it), checkpoints with ``TRUNCATE`` until no
reader is in the way or the time bound runs out, and only then deletes the
marker. The checkpoint copies the vacuumed image over every page of the
``.db`` and truncates it, so once it succeeds no erased byte remains.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

from sqlalchemy import Connection

from memstore.db.backend import CompactionResult
from memstore.db.engine import Database
from memstore.db.schema import erasure_compaction
from memstore.errors import StorageError
from memstore.timeutil import system_clock, to_iso

# The next write of a store retries a pending compaction at most this often.
RETRY_INTERVAL_S = 1.0


def mark_pending(conn: Connection, tombstone_position: int) -> None:
    """In the erasure's own transaction: the file must be compacted."""
    conn.execute(erasure_compaction.delete())
    conn.execute(
        erasure_compaction.insert().values(
            id=1,
            requested_at=to_iso(system_clock()),
            tombstone_position=tombstone_position,
            vacuumed=0,
        )
    )


def compact(db: Database, *, wait_s: float, full: bool = False) -> CompactionResult:
    """Finish a pending compaction; ``done`` says whether the erased bytes are gone.

    Waits at most about ``wait_s`` seconds for readers of older snapshots.
    ``full`` asks PostgreSQL for ``VACUUM FULL`` (``memstore.db.backend.
    postgres.vacuum`` says what each leaves behind); SQLite's VACUUM always
    rewrites the file."""
    return db.backend.compact_after_erasure(db, wait_s=wait_s, full=full)


def is_pending(db: Database) -> bool:
    with db.read() as conn:
        return conn.execute(erasure_compaction.select().limit(1)).first() is not None


def is_pending_at(path: Path | str) -> bool:
    """Whether the database at ``path`` (a file or URL) still has an unfinished
    erasure compaction (for a caller whose store is already closed)."""
    from memstore.db.connect import open_database

    db = open_database(path)
    try:
        return is_pending(db)
    finally:
        db.close()


class Compactor:
    """A store's view of pending compaction: what open, close and writes call."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.pending = False
        self._last_try = 0.0
        self._lock = threading.Lock()

    def run(self, wait_s: float, *, full: bool = False) -> CompactionResult:
        with self._lock:
            self._last_try = time.monotonic()
            result = compact(self.db, wait_s=wait_s, full=full)
            self.pending = not result.done
            return result

    def on_open(self, wait_s: float = 1.0) -> None:
        if is_pending(self.db):
            self.run(wait_s)

    def after_write(self) -> None:
        """Cheap unless a compaction is known to be pending; then retried at
        most every ``RETRY_INTERVAL_S`` without waiting for readers."""
        if self.pending and time.monotonic() - self._last_try >= RETRY_INTERVAL_S:
            self.run(0.0)

    def on_close(self, wait_s: float = 1.0) -> None:
        # Closing must not fail because the file went bad meanwhile; the
        # marker stays and the next open tries again.
        with contextlib.suppress(StorageError):
            if self.pending or is_pending(self.db):
                self.run(wait_s)


__all__ = [
    "CompactionResult",
    "Compactor",
    "compact",
    "is_pending",
    "is_pending_at",
    "mark_pending",
]
