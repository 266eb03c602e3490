"""Derivation gives way to the captures of its own process.

Derivation shares the interpreter lock and the write lock with captures.
Measured on 2 cores with eight threads capturing and every default on (the
timers, the rule deriver, e5), the captures slower than the 99th percentile
all overlapped a work item; the items ran back to back, often two at once
(the scheduler has two job threads).

So, while captures arrive:

- items run one at a time, whichever thread drains (an idle process keeps
  both threads: an item waiting on an LLM holds no core);
- after an item during which captures arrived, every drain of the process
  rests up to ``ratio`` times the CPU the item used: the full ratio once
  ``FULL_AT`` captures arrived during the item (a burst), a share of it for
  fewer (one capture of a chatting user costs the next item ``ratio /
  FULL_AT`` of its CPU, so memories still follow a conversation closely).
  CPU, not wall time: an item that mostly waits on an LLM used little and
  rests little, while a rule extraction, all CPU, rests in proportion.

With no capture during an item nothing changes: the next item starts at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# A capture this recent makes an item take its turn alone.
BUSY_WINDOW_S = 1.0
# Rest per CPU second of an item during which a burst of captures arrived.
# Measured with `memstore bench load --pipeline --embedder e5`'s library phase,
# eight threads, three rounds each (BENCHMARKS.md, "Concurrent capture"): p99
# was 3.8-4.8x p50 with 8, 3.8-4.0x with 24 and 3.1-4.0x with 64. Under a
# burst derivation gets at most 1/(1 + ratio) of a core (the rule deriver
# then extracts ~40 turns a second) and catches up once the burst ends.
DEFAULT_RATIO = 64.0
# Captures during one item that earn it the full ratio. Eight threads capture
# ~2,000 turns a second, hundreds during an item of the rule deriver.
FULL_AT = 32


class Pacer:
    """The turn-taking of one process's drains (see the module docstring)."""

    def __init__(self, stopping: threading.Event, ratio: float = DEFAULT_RATIO) -> None:
        self.ratio = ratio
        self.last_capture = 0.0  # time.monotonic() of the last capture seen
        self.captures = 0  # captures seen since the process began
        self._stopping = stopping
        self._resume_at = 0.0
        self._lock = threading.Lock()
        self._alone = threading.Lock()

    def captured(self, count: int = 1) -> None:
        """``count`` captures were committed (one transaction may hold many)."""
        self.captures += count
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
        cpu, seen = time.thread_time(), self.captures
        try:
            yield
        finally:
            if alone:
                self._alone.release()
            self.after(time.thread_time() - cpu, self.captures - seen)

    def after(self, cpu_s: float, captures: int) -> None:
        """An item used ``cpu_s`` while ``captures`` arrived: if any did,
        move the drains' rest later (see the module docstring), then rest."""
        if self.ratio > 0 and captures > 0:
            share = min(1.0, captures / FULL_AT)
            with self._lock:
                now = time.monotonic()
                self._resume_at = max(self._resume_at, now) + cpu_s * self.ratio * share
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
