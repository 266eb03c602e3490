"""``SessionRegistry``: one long-lived host object per session between requests.

Keeps a Hermes ``MemoryManager`` (or an agent, or anything with a shutdown)
per session: exclusive check-out / check-in, a size bound (least recently
checked in goes first) and an idle TTL; evicted objects are drained and shut
down on a background thread so the request that caused the eviction never
waits for it. The same contract as newer Hermes' api_server registry, for any
Python host.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


def drain_and_shutdown(obj: Any, timeout_s: float) -> None:
    """Default eviction: ``flush_pending(timeout)`` if it has one, then the
    first of ``shutdown_all`` (a Hermes MemoryManager), ``shutdown``, ``close``."""
    flush = getattr(obj, "flush_pending", None)
    if callable(flush):
        flush(timeout=timeout_s)
    for name in ("shutdown_all", "shutdown", "close"):
        fn = getattr(obj, name, None)
        if callable(fn):
            fn()
            return


def _session_of(obj: Any) -> Hashable:
    return str(getattr(obj, "session_id", "") or "")


class SessionRegistry(Generic[T]):
    """One parked object per session, checked out exclusively per request.

    ``checkout(session)`` removes and returns the parked object (or None:
    build a fresh one), so two concurrent requests on one session never share
    it. ``checkin(obj)`` parks it under ``session_of(obj)`` (by default its
    ``session_id``, which follows a rotation mid-turn) or the given session;
    whatever that displaces, and whatever is idle beyond ``idle_ttl_s`` or
    beyond ``max_size`` (least recently checked in first), is evicted: drained
    and shut down on the registry's worker thread. ``close_all()`` evicts
    everything inline and waits for evictions in flight.
    """

    def __init__(
        self,
        *,
        max_size: int = 64,
        idle_ttl_s: float = 3600.0,
        drain_timeout_s: float = 10.0,
        session_of: Callable[[T], Hashable] = _session_of,
        evict: Callable[[T, float], None] = drain_and_shutdown,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        self.max_size = max_size
        self.idle_ttl_s = idle_ttl_s
        self.drain_timeout_s = drain_timeout_s
        self._session_of = session_of
        self._evict = evict
        self._monotonic = clock
        self._parked: OrderedDict[Hashable, tuple[T, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._doomed: queue.SimpleQueue[T] = queue.SimpleQueue()
        self._pending = 0
        self._idle = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None
        self.evicted = 0

    def checkout(self, session: Hashable) -> T | None:
        if session is None or session == "":
            return None
        with self._lock:
            entry = self._parked.pop(session, None)
            doomed = self._expire_locked(self._monotonic())
        self._schedule(doomed)
        return entry[0] if entry is not None else None

    def checkin(self, obj: T, session: Hashable | None = None) -> None:
        key = self._session_of(obj) if session is None else session
        if key is None or key == "":
            # Nothing to key it by: it cannot be reused, so retire it.
            self._schedule([obj])
            return
        now = self._monotonic()
        with self._lock:
            displaced = self._parked.pop(key, None)
            doomed = [displaced[0]] if displaced is not None and displaced[0] is not obj else []
            self._parked[key] = (obj, now)
            doomed += self._expire_locked(now)
            while len(self._parked) > self.max_size:
                _key, (old, _t) = self._parked.popitem(last=False)
                doomed.append(old)
        self._schedule(doomed)

    def sweep(self) -> int:
        """Evict idle entries now; returns how many."""
        with self._lock:
            doomed = self._expire_locked(self._monotonic())
        self._schedule(doomed)
        return len(doomed)

    def parked(self) -> dict[Hashable, T]:
        with self._lock:
            return {k: v[0] for k, v in self._parked.items()}

    def __len__(self) -> int:
        with self._lock:
            return len(self._parked)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until background evictions are done; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close_all(self) -> None:
        with self._lock:
            items = [v[0] for v in self._parked.values()]
            self._parked.clear()
        for obj in items:
            self._run_evict(obj)
        self.wait_idle(self.drain_timeout_s + 5.0)

    # -- eviction ------------------------------------------------------------------

    def _expire_locked(self, now: float) -> list[T]:
        stale = [k for k, (_o, t) in self._parked.items() if now - t > self.idle_ttl_s]
        return [self._parked.pop(k)[0] for k in stale]

    def _schedule(self, doomed: list[T]) -> None:
        if not doomed:
            return
        with self._lock:
            self._pending += len(doomed)
            for obj in doomed:
                self._doomed.put(obj)
            if self._worker is None:
                # One worker while there is work; it exits when the queue is
                # empty, so an idle registry holds no thread.
                self._worker = threading.Thread(
                    target=self._work, name="memstore-session-evict", daemon=True
                )
                self._worker.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                try:
                    obj = self._doomed.get_nowait()
                except queue.Empty:
                    self._worker = None
                    return
            try:
                self._run_evict(obj)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _run_evict(self, obj: T) -> None:
        try:
            self._evict(obj, self.drain_timeout_s)
            self.evicted += 1
        except Exception:
            # A host object that fails to shut down must not kill the worker
            # (other evictions are queued behind it); the failure is logged.
            log.warning("session registry: shutting down %r failed", obj, exc_info=True)


__all__ = ["SessionRegistry", "drain_and_shutdown"]
