"""Pacer: the drains of a process give way to its captures."""

from __future__ import annotations

import threading
import time

from memstore.pipeline.pacing import Pacer


class Recording(Pacer):
    def __init__(self, ratio: float = 4.0) -> None:
        super().__init__(threading.Event(), ratio)
        self.rests: list[float] = []

    def _rest(self, seconds: float) -> None:
        self.rests.append(seconds)
        time.sleep(seconds)


def test_no_capture_during_an_item_no_rest() -> None:
    p = Recording()
    p.captured()
    started = time.monotonic()
    p.after(started + 0.001, 0.5)  # the capture came before the item began
    assert p.rests == []


def test_a_capture_during_an_item_rests_ratio_times_its_cpu() -> None:
    p = Recording(ratio=4.0)
    started = time.monotonic()
    p.captured()
    t0 = time.monotonic()
    p.after(started, 0.01)
    assert time.monotonic() - t0 >= 0.04
    assert p.rests and p.rests[0] <= 0.04


def test_a_ratio_of_zero_never_rests() -> None:
    p = Recording(ratio=0.0)
    started = time.monotonic()
    p.captured()
    p.after(started, 1.0)
    assert p.rests == []


def test_the_rest_holds_every_drain_of_the_process() -> None:
    p = Recording(ratio=10.0)
    started = time.monotonic()
    p.captured()
    resting = threading.Thread(target=p.after, args=(started, 0.02))  # 0.2 s of rest
    resting.start()
    while not p.rests:  # the first drain is resting
        time.sleep(0.001)
    t0 = time.monotonic()
    p.wait()  # another drain, asking for its turn meanwhile
    waited = time.monotonic() - t0
    resting.join(5)
    assert waited >= 0.1


def test_while_captures_arrive_items_run_one_at_a_time() -> None:
    p = Recording(ratio=0.001)  # a rest too short to matter here
    p.captured()
    inside = threading.Event()
    release = threading.Event()
    entered: list[str] = []

    def first() -> None:
        with p.turn():
            entered.append("first")
            inside.set()
            release.wait(5)

    def second() -> None:
        with p.turn():
            entered.append("second")

    a = threading.Thread(target=first)
    a.start()
    assert inside.wait(5)
    b = threading.Thread(target=second)
    b.start()
    b.join(0.2)
    assert b.is_alive() and entered == ["first"]  # waits for the first item
    release.set()
    a.join(5)
    b.join(5)
    assert entered == ["first", "second"]


def test_with_no_recent_capture_items_run_side_by_side() -> None:
    p = Recording()
    both = threading.Barrier(2, timeout=5)

    def drain() -> None:
        with p.turn():
            both.wait()  # would time out if one waited for the other

    threads = [threading.Thread(target=drain) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not both.broken


def test_a_stop_ends_the_rest() -> None:
    stopping = threading.Event()
    p = Pacer(stopping, ratio=1000.0)
    started = time.monotonic()
    p.captured()
    threading.Timer(0.05, stopping.set).start()
    t0 = time.monotonic()
    p.after(started, 1.0)  # 1000 s of rest, cut short by the stop
    assert time.monotonic() - t0 < 5
