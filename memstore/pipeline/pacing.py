"""Derivation gives way to the captures of its own process.

Derivation shares the interpreter lock and the write lock with captures.
Measured on 2 cores with eight threads capturing and every default on (the
timers, the rule deriver, e5), the captures slower than the 99th percentile
all overlapped a work item; the items ran back to back, often two at once
(the scheduler has two job threads).

So, while captures arrive:

- items run one at a time, whichever thread drains (an idle process keeps
  both threads: an item waiting on an LLM holds no core);
- after an item during which a capture arrived, every drain of the process
  rests ``ratio`` times the CPU the item used. CPU, not wall time: an item
  that mostly waits on an LLM used little and rests little, while a rule
  extraction, all CPU, rests in proportion.

With no capture during an item nothing changes: the next item starts at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# A capture this recent makes an item take its turn alone.
BUSY_WINDOW_S = 1.0
# Rest per CPU second of an item during which captures arrived. Measured with
# `memstore bench load`'s library phase on a default store, eight threads
# (BENCHMARKS.md, "Concurrent capture"): p99 was 3.8-4.8x p50 with 8, 3.9-4.3x
# with 24. Under a burst derivation gets at most 1/(1 + ratio) of a core; the
# rule deriver then still keeps up with ~100 turns a second, and an LLM's item,
# mostly waiting, uses little CPU and so rests little.
DEFAULT_RATIO = 24.0


class Pacer:
    """The turn-taking of one process's drains (see the module docstring)."""

    def __init__(self, stopping: threading.Event, ratio: float = DEFAULT_RATIO) -> None:
        self.ratio = ratio
        self.last_capture = 0.0  # time.monotonic() of the last capture seen
        self._stopping = stopping
        self._resume_at = 0.0
        self._lock = threading.Lock()
        self._alone = threading.Lock()

    def captured(self) -> None:
        self.last_capture = time.monotonic()

    def busy(self, since: float) -> bool:
        """Whether a capture arrived at or after ``since`` (time.monotonic())."""
        return self.last_capture >= since

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Claim and run one work item inside: waits for the drains' rest to
        end and, while captures arrive, for any other item of the process
        (before the claim, so a claimed item never waits with its lock
        unrenewed)."""
        self.wait()
        alone = self.ratio > 0 and self.busy(time.monotonic() - BUSY_WINDOW_S)
        if alone:
            self._alone.acquire()
        started, cpu = time.monotonic(), time.thread_time()
        try:
            yield
        finally:
            if alone:
                self._alone.release()
            self.after(started, time.thread_time() - cpu)

    def after(self, started: float, cpu_s: float) -> None:
        """An item begun at ``started`` used ``cpu_s``: if a capture arrived
        meanwhile, move the drains' rest ``ratio * cpu_s`` later, then rest."""
        if self.ratio > 0 and self.busy(started):
            with self._lock:
                self._resume_at = max(self._resume_at, time.monotonic()) + cpu_s * self.ratio
        self.wait()

    def wait(self) -> None:
        """Until the drains' rest is over (a stop ends it)."""
        while not self._stopping.is_set():
            left = self._resume_at - time.monotonic()
            if left <= 0:
                return
            self._rest(left)

    def _rest(self, seconds: float) -> None:
        self._stopping.wait(seconds)
