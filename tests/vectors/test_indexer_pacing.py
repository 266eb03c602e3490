"""The background indexer rests after a batch during which captures arrived
(as long as the batch took, by default), and goes on at once otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
from sqlalchemy import text

from memstore.store import Store
from memstore.vectors.background import BUSY_S, BackgroundIndexer

pytestmark = pytest.mark.both_backends


class Recording(BackgroundIndexer):
    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.rests: list[float] = []

    def _rest(self, seconds: float) -> None:
        self.rests.append(seconds)


def test_rests_only_after_batches_that_captures_overlapped(store: Store) -> None:
    assert store._parts.indexer is not None
    bg = Recording(store._parts.indexer, yield_ratio=2.0)  # never started: _pace by hand
    bg._step_started = time.monotonic() - 0.01
    bg._pace(16)  # nothing captured during the batch
    assert bg.rests == []
    bg.notify()  # a capture committed during the next batch
    time.sleep(0.001)
    began = bg._step_started
    bg._pace(16)
    took = bg._step_started - began
    assert len(bg.rests) == 1 and 0 < bg.rests[0] <= 2.0 * took
    bg._pace(16)  # and none since
    assert len(bg.rests) == 1


def test_yield_ratio_zero_never_rests(store: Store) -> None:
    assert store._parts.indexer is not None
    bg = Recording(store._parts.indexer, yield_ratio=0.0)
    bg._step_started = time.monotonic() - 0.01
    bg.notify()
    bg._pace(16)
    assert bg.rests == []


def test_a_store_captures_and_indexes_with_the_pacing_on(store: Store) -> None:
    store._parts.start_background()
    for i in range(30):
        store.capture_turn("u", "s", f"turn {i} about the pottery class", "noted")
    deadline = time.monotonic() + 60
    while store._parts.indexer is not None and store._parts.indexer.pending("l0"):
        assert time.monotonic() < deadline, "the indexer never caught up"
        time.sleep(0.05)


def test_keyword_batches_rest_like_vector_batches(store: Store) -> None:
    assert store._parts.indexer is not None
    given: list[object] = []
    bg = Recording(store._parts.indexer, yield_ratio=2.0, keywords=lambda p: given.append(p) or 0)
    bg._step_started = time.monotonic()
    bg._pace(16)
    # The keyword pass gets the same rule, applied after each of its batches.
    assert given == [bg._rest_if_busy]
    started = time.monotonic()
    assert bg._rest_if_busy(started) is False and bg.rests == []  # nothing captured
    bg.notify()
    time.sleep(0.002)
    assert bg._rest_if_busy(started) is False
    assert len(bg.rests) == 1 and 2 * 0.002 <= bg.rests[0] <= 2 * (time.monotonic() - started)
    bg._stop.set()
    assert bg._rest_if_busy(time.monotonic()) is True  # a stopping store ends the pass


def test_vectors_are_written_while_captures_never_pause(store: Store) -> None:
    # One thread capturing without a pause kept the keyword pass busy for
    # good (no vector in 8,000 captures): each pass now ends with what was
    # stored when it began, so vector batches run between passes while the
    # captures go on (about 2,800 of the first 6,000 messages on a quiet
    # machine). The captures go on until 300 messages have vectors, so a
    # slow or busy machine only takes longer; the old pass would never
    # let that happen while they did.
    indexer = store._parts.indexer
    assert indexer is not None
    store._parts.start_background()
    space = indexer.space("l0")

    def embedded() -> int:
        with store._db.read() as conn:
            return int(
                conn.execute(
                    text("SELECT cursor FROM vector_spaces WHERE name = :n"), {"n": space.name}
                ).scalar_one()
            )

    deadline = time.monotonic() + 60
    i = done = 0
    while done < 300 and time.monotonic() < deadline:
        for _ in range(200):
            store.capture_turn("u", "s", f"turn {i} about the glaze and the kiln", "noted, go on")
            i += 1
        done = embedded()
    assert done >= 300, f"{done} of {2 * i:,} messages embedded while they were captured"


def test_busy_while_captures_arrived_within_the_last_second(store: Store) -> None:
    assert store._parts.indexer is not None
    bg = Recording(store._parts.indexer)
    assert not bg.busy()  # nothing captured yet
    bg.notify()
    assert bg.busy()
    bg._last_notify -= BUSY_S + 0.1  # that capture, a moment over the window ago
    assert not bg.busy()


def test_the_thread_embeds_sparingly_and_asks_about_captures(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    indexer = store._parts.indexer
    assert indexer is not None
    asked: list[Callable[[], bool]] = []
    plain = indexer.embedder.sparing

    def sparing(busy: Callable[[], bool]) -> AbstractContextManager[None]:
        asked.append(busy)
        return plain(busy)

    monkeypatch.setattr(indexer.embedder, "sparing", sparing)
    store.capture_turn("u", "s", "the kiln reached cone six", "and the glaze?")
    bg = BackgroundIndexer(indexer, interval_s=0.05, settle_s=0.0)
    bg.start()
    try:
        deadline = time.monotonic() + 30
        while not asked and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        bg.stop()
    assert asked and asked[0] == bg.busy
