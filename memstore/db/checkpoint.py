"""WAL checkpoints on a thread of their own, not in a capture's commit.

By default SQLite checkpoints inside the COMMIT that takes the WAL past
1,000 pages: that writer copies the WAL's pages into the database file and,
at ``synchronous=NORMAL``, fsyncs it — a capture that happens to be the one
pays milliseconds to tens of milliseconds (the p99 of idle capture). Here
every connection of the store runs with ``wal_autocheckpoint = 0`` and this
thread runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own
once every ``EVERY`` write transactions: PASSIVE takes no lock a writer or
a reader waits for (it copies what no reader still needs and leaves the
rest for the next pass), and the driver releases the interpreter lock while
SQLite works, so captures go on meanwhile. Once a pass copied everything,
the next writer starts the WAL over from its beginning, as with automatic
checkpoints.

Nothing about durability changes: a commit is in the WAL before it returns;
a checkpoint only moves committed pages into the main file. If the process
dies the WAL is simply longer; the next open (or the last connection's
close, which checkpoints) folds it in.

The thread (and its connection) starts with the first write of the process
and lasts until the store closes; a forked child (which inherits no
threads) starts its own.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Write transactions between two checkpoint passes. A capture adds ~8-12
# pages to the WAL, so about SQLite's own 1,000-page trigger.
EVERY = 100


class Checkpointer:
    def __init__(self, path: Path, module: Any, busy_timeout_ms: int) -> None:
        self.path = path
        self.module = module
        self.busy_timeout_ms = busy_timeout_ms
        self._writes = 0
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.passes = 0

    def wrote(self) -> None:
        """After a write transaction committed (under the write lock)."""
        if self._pid != os.getpid() or self._thread is None:
            self._start()  # at the first write: its thread and connection stay from then on
        self._writes += 1
        if self._writes < EVERY:
            return
        self._writes = 0
        self._wake.set()

    def _start(self) -> None:
        self._pid = os.getpid()
        self._stop = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memstore-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn = None
        try:
            conn = self.module.connect(str(self.path), isolation_level=None, timeout=0)
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stop:
                    return
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.passes += 1
                except self.module.Error as e:  # the next pass tries again
                    log.debug("WAL checkpoint of %s failed: %s", self.path, e)
        except Exception as e:  # never lose the reason; captures go on either way
            log.warning("WAL checkpoint thread of %s stopped: %s", self.path, e)
        finally:
            if conn is not None:
                conn.close()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (before the engine closes; the last connection's
        close checkpoints what is left)."""
        thread = self._thread
        if thread is None or self._pid != os.getpid():
            return
        self._stop = True
        self._wake.set()
        thread.join(timeout_s)
        self._thread = None


__all__ = ["EVERY", "Checkpointer"]
