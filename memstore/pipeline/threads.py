"""Worker threads that never keep the interpreter from exiting.

``concurrent.futures.ThreadPoolExecutor`` joins its workers at interpreter
exit, so one job stuck in a slow LLM call (or a lock) made a script hang
after its last line. These workers are daemon threads: ``shutdown`` waits for
running work up to a bound, and whatever is still running then is abandoned
to the process's end (its effects are transactional; an unfinished run
leaves its queue item to be claimed again).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from memstore.logtext import loggable

log = logging.getLogger(__name__)

_Task = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonPool:
    """A minimal ``concurrent.futures``-style pool of daemon threads
    (``submit`` and ``shutdown``, which is all APScheduler's executors use)."""

    def __init__(self, max_workers: int, name: str) -> None:
        self._max = max(1, max_workers)
        self._name = name
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new work after shutdown")
            fut: Future[Any] = Future()
            self._tasks.put((fut, fn, args, kwargs))
            if self._idle > 0:
                self._idle -= 1  # an idle worker will take it
            elif len(self._threads) < self._max:
                t = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(t)
                t.start()
            return fut

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            fut, fn, args, kwargs = task
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn(*args, **kwargs))
                except BaseException as e:
                    fut.set_exception(e)
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, timeout: float | None = None) -> bool:
        """Stop taking work; with ``wait``, let queued and running work finish
        within ``timeout`` seconds. Returns False if some was still running."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        for _ in threads:
            self._tasks.put(None)
        if not wait:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            log.debug("left running at shutdown (daemon, ends with the process): %s", stuck)
        return not stuck


def time_left(deadline: float) -> float:
    """Seconds until ``deadline`` (a ``time.monotonic()`` value), never negative."""
    return max(0.0, deadline - time.monotonic())


def log_failure(what: str, stopping: Callable[[], bool]) -> Callable[[Future[Any]], None]:
    """A done-callback that logs an exception the future ended with (at DEBUG
    once ``stopping()``: closing caused it)."""

    def check(fut: Future[Any]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.log(
                logging.DEBUG if stopping() else logging.WARNING,
                "%s work failed (reconcile repairs timers): %s",
                what,
                loggable(exc),
            )
            log.debug("%s work failed", what, exc_info=exc)

    return check


__all__ = ["DaemonPool", "log_failure", "time_left"]
