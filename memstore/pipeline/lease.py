"""One scheduler per database file: a lease (a TTL lock row) and its keeper.

Every process that wants to run background work starts a ``LeaseKeeper``.
It tries to take the lease, renews it every ``ttl_s / 3`` while it holds it,
and calls ``on_gain`` / ``on_loss`` when that changes; ``on_tick`` runs on
every renewal by the holder. A holder that dies stops renewing, its lease
expires after ``ttl_s``, and the next keeper to try takes it over.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from memstore.db.engine import Database
from memstore.pipeline import queue
from memstore.timeutil import Clock

log = logging.getLogger(__name__)

LEASE_KEY = "lease:scheduler"


class LeaseKeeper:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        owner: str,
        ttl_s: float,
        *,
        on_gain: Callable[[], None],
        on_loss: Callable[[], None],
        on_tick: Callable[[], None] = lambda: None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.owner = owner
        self.ttl_s = ttl_s
        self._on_gain = on_gain
        self._on_loss = on_loss
        self._on_tick = on_tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.held = False

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="memstore-lease", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            # Bounded: a tick waits at most busy_timeout for the database; the
            # thread is a daemon, so exit never waits on it either way.
            self._thread.join(timeout_s)
            self._thread = None
        if self.held:
            self.held = False
            self._on_loss()
            with self.db.write() as conn:
                queue.release_lock(conn, LEASE_KEY, self.owner)

    def _loop(self) -> None:
        interval = max(0.05, self.ttl_s / 3)
        while True:
            self.tick()
            if self._stop.wait(interval):
                return

    def tick(self) -> None:
        """One renewal attempt (the loop's body; tests may call it directly)."""
        try:
            with self.db.write() as conn:
                held = queue.acquire_lock(
                    conn, LEASE_KEY, self.owner, now=self.clock(), ttl_s=self.ttl_s
                )
            if held and not self.held:
                self.held = True
                log.debug("scheduler lease taken by %s", self.owner)
                self._on_gain()
            elif not held and self.held:
                self.held = False
                log.warning("scheduler lease lost by %s", self.owner)
                self._on_loss()
            if self.held:
                self._on_tick()
        except Exception:
            # Anything unexpected here must not leave a scheduler running
            # without a lease (two schedulers would share one job table).
            log.exception("lease keeper tick failed; pausing this process's scheduler")
            if self.held:
                self.held = False
                self._on_loss()


__all__ = ["LEASE_KEY", "LeaseKeeper"]
