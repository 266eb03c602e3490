"""One open ``Store`` per database file per process, reference-counted.

A host object (a Hermes provider, say) takes a ``StoreLease`` and holds nothing
else: the store owns the connections, the indexer and the scheduler, so a
thousand short-lived host objects cost one store. A lease is released
explicitly, or when its owner is garbage-collected (``lease.bind(owner)``),
because Hermes 0.19.0's api_server never calls ``shutdown``. When the last
lease goes, the store stays open for ``linger_s`` so the next request does not
pay a cold open, then closes on a timer thread the registry owns.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstore.config import Settings
from memstore.errors import MemstoreError
from memstore.logtext import loggable
from memstore.store import Store

log = logging.getLogger(__name__)

DEFAULT_LINGER_S = 30.0
EXIT_CLOSE_TIMEOUT_S = 10.0

StoreOpener = Callable[[Path, Settings], Store]


def _open_store(path: Path, settings: Settings) -> Store:
    store = Store.open(path, settings=settings)
    # The embedder loads now, on a thread of its own, rather than under the
    # agent's first turns: e5's first load holds the interpreter lock for
    # ~0.65 s (Store.load_embedder), which stalls every thread of the host.
    threading.Thread(
        target=_load_embedder, args=(store,), name="memstore-embedder-load", daemon=True
    ).start()
    return store


def _load_embedder(store: Store) -> None:
    try:
        store.load_embedder()
    except MemstoreError as exc:  # the first embedding reports it again, where it matters
        log.info("memstore: the embedder did not load ahead: %s", loggable(exc))


def store_key(path: str | Path) -> Path:
    """The identity of a database file: absolute, symlinks resolved."""
    return Path(path).expanduser().resolve()


@dataclass
class _Entry:
    key: Path
    refs: int = 0
    store: Store | None = None
    # Serialises the (possibly slow) open of this one path without holding
    # the registry lock, so a cold open never delays other paths.
    open_lock: threading.Lock = field(default_factory=threading.Lock)
    timer: threading.Timer | None = None


class StoreLease:
    """One holder's reference to a shared store; ``release()`` is idempotent."""

    def __init__(self, registry: SharedStores, key: Path, store: Store) -> None:
        self._registry = registry
        self.key = key
        self.store = store
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._released = False

    def bind(self, owner: object) -> StoreLease:
        """Release this lease when ``owner`` is garbage-collected."""
        self._finalizer = weakref.finalize(owner, self._release_from_gc)
        return self

    @property
    def released(self) -> bool:
        return self._released

    def release(self, *, linger_s: float | None = None) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
        if self._released:
            return
        self._released = True
        self._registry._release(self.key, linger_s)

    def _release_from_gc(self) -> None:
        # Runs inside the garbage collector, possibly on a thread that holds
        # the registry lock already: it must not block, so it only queues.
        if not self._released:
            self._released = True
            self._registry._release_soon(self.key)


class SharedStores:
    """Process-wide, reference-counted ``Store`` per database file."""

    def __init__(
        self, opener: StoreOpener = _open_store, *, linger_s: float = DEFAULT_LINGER_S
    ) -> None:
        self._opener = opener
        self.linger_s = linger_s
        self._lock = threading.Lock()
        self._entries: dict[Path, _Entry] = {}
        # SimpleQueue.put is safe to call from a weakref callback (reentrant).
        self._gc_released: queue.SimpleQueue[Path] = queue.SimpleQueue()

    def acquire(self, path: str | Path, settings: Settings) -> StoreLease:
        """Open the store at ``path`` or join the one already open.

        The first holder's ``settings`` open the store; later holders share it
        as it is (a store has one embedder, one scheduler, one pipeline)."""
        key = store_key(path)
        self._drain_gc_released()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(key)
            entry.refs += 1
            if entry.timer is not None:
                entry.timer.cancel()
                entry.timer = None
        try:
            with entry.open_lock:
                if entry.store is None:
                    entry.store = self._opener(key, settings)
                store = entry.store
        except BaseException:
            self._release(key, 0.0)
            raise
        return StoreLease(self, key, store)

    def refs(self, path: str | Path) -> int:
        self._drain_gc_released()
        with self._lock:
            entry = self._entries.get(store_key(path))
            return entry.refs if entry is not None else 0

    def open_paths(self) -> list[Path]:
        self._drain_gc_released()
        with self._lock:
            return [k for k, e in self._entries.items() if e.store is not None]

    def close_all(self, timeout_s: float | None = None) -> None:
        """Close every store now, whoever still holds it (process exit, tests).

        With ``timeout_s`` each close runs on a daemon thread and is abandoned
        (logged) after that long: at interpreter exit a stuck drain must not
        hang the host, and everything committed is already durable."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            for e in entries:
                if e.timer is not None:
                    e.timer.cancel()
        for e in entries:
            if timeout_s is None:
                self._close(e)
                continue
            closer = threading.Thread(
                target=self._close, args=(e,), name="memstore-store-close", daemon=True
            )
            closer.start()
            closer.join(timeout_s)
            if closer.is_alive():
                log.warning("memstore: closing %s took over %.0f s; left to exit", e.key, timeout_s)

    # -- releasing ---------------------------------------------------------------

    def _release(self, key: Path, linger_s: float | None) -> None:
        self._drain_gc_released()
        self._release_one(key, self.linger_s if linger_s is None else linger_s)

    def _release_one(self, key: Path, linger: float) -> None:
        close_now: _Entry | None = None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            entry.refs = max(0, entry.refs - 1)
            if entry.refs > 0:
                return
            if linger <= 0:
                del self._entries[key]
                close_now = entry
            elif entry.timer is None:
                timer = threading.Timer(linger, self._linger_expired, args=(key,))
                timer.name = "memstore-store-linger"
                timer.daemon = True
                entry.timer = timer
                timer.start()
        if close_now is not None:
            self._close(close_now)

    def _release_soon(self, key: Path) -> None:
        self._gc_released.put(key)
        # Apply it now if nobody holds the lock; otherwise the next registry
        # call does. The lock is free here, so this thread cannot be the one
        # holding it: taking it below waits at worst for another thread.
        if self._lock.acquire(blocking=False):
            self._lock.release()
            self._drain_gc_released(from_gc=True)

    def _drain_gc_released(self, *, from_gc: bool = False) -> None:
        # Closing (a bounded drain) must not run inside the garbage collector:
        # from there a count reaching zero always lingers onto the timer thread.
        linger = max(self.linger_s, 0.001) if from_gc else self.linger_s
        while True:
            try:
                key = self._gc_released.get_nowait()
            except queue.Empty:
                return
            self._release_one(key, linger)

    def _linger_expired(self, key: Path) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.refs > 0 or entry.timer is None:
                return
            if threading.current_thread() is not entry.timer:
                return  # a newer timer owns the close
            del self._entries[key]
            entry.timer = None
        self._close(entry)

    @staticmethod
    def _close(entry: _Entry) -> None:
        with entry.open_lock:
            store, entry.store = entry.store, None
        if store is not None:
            store.close()


_shared: SharedStores | None = None
_shared_lock = threading.Lock()


def shared_stores() -> SharedStores:
    """The process-wide registry used by ``acquire`` and the Hermes provider.

    Made on first use, which is also when its stores are set to close at
    interpreter exit: importing this module starts nothing and registers
    nothing."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SharedStores()
            atexit.register(_shared.close_all, timeout_s=EXIT_CLOSE_TIMEOUT_S)
        return _shared


def acquire(path: str | Path, settings: Settings) -> StoreLease:
    """A lease on the process-wide store for ``path``; see ``SharedStores``."""
    return shared_stores().acquire(path, settings)


def acquire_store(path: str | Path, settings: Settings) -> Store:
    """Like ``acquire`` for callers that keep the ``Store``: pair with ``release_store``."""
    lease = shared_stores().acquire(path, settings)
    with _LEASES_LOCK:
        _LEASES.setdefault(id(lease.store), []).append(lease)
    return lease.store


def release_store(store: Store) -> None:
    """Give back one reference taken with ``acquire_store``."""
    with _LEASES_LOCK:
        leases = _LEASES.get(id(store))
        lease = leases.pop() if leases else None
        if leases == []:
            del _LEASES[id(store)]
    if lease is not None:
        lease.release()


_LEASES: dict[int, list[StoreLease]] = {}
_LEASES_LOCK = threading.Lock()


__all__ = [
    "DEFAULT_LINGER_S",
    "SharedStores",
    "StoreLease",
    "acquire",
    "acquire_store",
    "release_store",
    "shared_stores",
    "store_key",
]
