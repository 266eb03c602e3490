"""The background indexer: the thread that embeds what captures left, and
writes their keyword rows, while giving way to the captures of its process
(the work itself is memstore.vectors.indexer's)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from memstore.errors import MemstoreError
from memstore.logtext import debug_detail, loggable
from memstore.text import fts_tidy
from memstore.vectors.indexer import Indexer

__all__ = ["BUSY_S", "BackgroundIndexer"]

log = logging.getLogger(__name__)

# Captures this recent make the background indexer embed on one core.
BUSY_S = 1.0


class BackgroundIndexer:
    """One daemon thread per Store: wakes on capture (``notify``) or every few seconds.

    After a wake-up it waits ``settle_s`` before it embeds, so the captures
    of that moment go in one pass: embedding each turn as it landed made one
    small batch per capture, each a write transaction the next capture
    queued behind, with the reads and the embedder call around it competing
    for the CPU (capture 2.3x slower with the indexer working). A
    quiet gap would not do: under load a capture itself takes longer than
    any short gap. Its batches are small (``batch`` rows), so a capture
    waits at most one short vec0 write for the lock. Vectors of a capture
    are searchable ``settle_s`` plus the embedding later (keyword search
    finds the message at once).

    While captures keep arriving (a backlog under load), the thread rests
    after each batch, of vectors or of keyword rows, for ``yield_ratio``
    times as long as the batch took: in one process it shares the
    interpreter lock and the write lock with the captures, and without a
    pause a backlog took most of both (8 capturing threads ran at 0.35-0.4x
    their rate with the indexer stopped). Keyword rows without the pause:
    8 threads captured ~15% less and their p99 was 5.4-6.1x p50 (3.2-3.6x
    with it), and the rows were no further ahead at the end. With nothing
    captured during a batch it goes on at full speed.
    """

    def __init__(
        self,
        indexer: Indexer,
        interval_s: float = 2.0,
        *,
        settle_s: float = 0.5,
        batch: int = 16,
        yield_ratio: float = 1.0,
        keywords: Callable[[Callable[[float], bool]], int] | None = None,
    ) -> None:
        self.indexer = indexer
        # Writes the keyword rows captures left to this thread
        # (memstore.derive.messages.keywords): before every embedding batch,
        # so a slow embedder never holds them back.
        self.keywords = keywords
        self.interval_s = interval_s
        self.settle_s = settle_s
        self.batch = batch
        self.yield_ratio = yield_ratio
        self._last_notify = 0.0
        self._step_started = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="memstore-indexer", daemon=True)
            self._thread.start()

    def notify(self) -> None:
        self._last_notify = time.monotonic()
        self._wake.set()

    def busy(self) -> bool:
        """Whether captures arrived within the last ``BUSY_S`` seconds: the
        embedder then leaves cores to them (``Embedder.sparing``)."""
        return time.monotonic() - self._last_notify < BUSY_S

    def _pace(self, _rows: int) -> None:
        """After each batch: rest if captures arrived while it ran, then the
        keyword rows waiting (their pass rests after each of its own)."""
        self._rest_if_busy(self._step_started)
        if self.keywords is not None:
            self.keywords(self._rest_if_busy)
        self._step_started = time.monotonic()

    def _rest_if_busy(self, started: float) -> bool:
        """After a batch begun at ``started``: rest as long as it took times
        ``yield_ratio`` if captures arrived meanwhile; True once stopping."""
        if self.yield_ratio > 0 and self._last_notify >= started:
            self._rest((time.monotonic() - started) * self.yield_ratio)
        return self._stop.is_set()

    def _rest(self, seconds: float) -> None:
        self._stop.wait(seconds)  # a stop ends the rest at once

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            woke = self._wake.wait(self.interval_s)
            if woke:
                self._stop.wait(self.settle_s)
                self._wake.clear()
            try:
                if self.keywords is not None:
                    self.keywords(self._rest_if_busy)
                self._step_started = time.monotonic()
                with self.indexer.embedder.sparing(self.busy):
                    self.indexer.run_until_idle(
                        batch=self.batch, progress=self._pace, should_stop=self._stop.is_set
                    )
                if woke:
                    # Something was written: merge the FTS segments it left
                    # (keyword search probes each one), in short steps.
                    fts_tidy.tidy(self.indexer.db, should_stop=self._stop.is_set)
                self.last_error = None
            except MemstoreError as e:
                # Logged and retried on the next wake-up: search degrades to keyword
                # meanwhile; no source data is at risk.
                self.last_error = str(e)
                stopping = self._stop.is_set()  # the store closing under a step
                level = logging.DEBUG if stopping else logging.WARNING
                log.log(level, "background indexer: %s", loggable(e))
                debug_detail(log, "background indexer", e)
