"""Pacer: the drains of a process give way to its captures."""

from __future__ import annotations

import threading
import time

from memstore.pipeline.pacing import FULL_AT, Pacer


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
    p.after(0.5, 0)  # the capture came before the item began
    assert p.rests == []


def test_a_burst_during_an_item_rests_ratio_times_its_cpu() -> None:
    p = Recording(ratio=4.0)
    p.captured(FULL_AT)
    t0 = time.monotonic()
    p.after(0.01, FULL_AT)
    assert time.monotonic() - t0 >= 0.04
    assert p.rests and p.rests[0] <= 0.04


def test_fewer_captures_rest_a_share_of_it() -> None:
    p = Recording(ratio=FULL_AT)
    p.captured()
    p.after(0.02, 1)  # one capture: 1/FULL_AT of the full 0.02 * FULL_AT s
    assert p.rests and p.rests[0] <= 0.02
    assert sum(p.rests) >= 0.01  # rested (the first rest may fall short of the end)


def test_a_turn_counts_the_captures_of_its_item() -> None:
    p = Recording(ratio=1000.0)
    with p.turn():
        spin_until = time.thread_time() + 0.002
        while time.thread_time() < spin_until:
            pass
    assert p.rests == []  # no capture during the item
    p.captured(FULL_AT)
    p._rest = lambda seconds: p.rests.append(seconds) or p._stopping.set()  # type: ignore[method-assign]
    with p.turn():
        p.captured(FULL_AT)  # a burst while the item runs
        spin_until = time.thread_time() + 0.002
        while time.thread_time() < spin_until:
            pass
    assert len(p.rests) == 1 and p.rests[0] >= 1.0  # 1000 x >= 2 ms of CPU


def test_a_ratio_of_zero_never_rests() -> None:
    p = Recording(ratio=0.0)
    p.captured()
    p.after(1.0, FULL_AT)
    assert p.rests == []


def test_the_rest_holds_every_drain_of_the_process() -> None:
    p = Recording(ratio=10.0)
    p.captured()
    resting = threading.Thread(target=p.after, args=(0.02, FULL_AT))  # 0.2 s of rest
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
    p.captured()
    threading.Timer(0.05, stopping.set).start()
    t0 = time.monotonic()
    p.after(1.0, FULL_AT)  # 1000 s of rest, cut short by the stop
    assert time.monotonic() - t0 < 5
