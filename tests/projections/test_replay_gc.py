"""A rebuild pauses Python's cyclic garbage collector while it replays, and
leaves it as it found it: on when it was on, off when the caller had it off,
and on again only when the last of two overlapping replays ends."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from memstore.projections.base import paused_gc
from memstore.store import Store

pytestmark = pytest.mark.both_backends


@pytest.fixture
def gc_state() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_rebuild_replays_with_the_collector_off_and_turns_it_back_on(
    store: Store, gc_state: None
) -> None:
    store.capture_turn("u", "s", "I like green tea", "noted")
    seen: list[bool] = []
    gc.enable()
    store.rebuild(progress=lambda _n: seen.append(gc.isenabled()))
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off(gc_state: None) -> None:
    gc.disable()
    with paused_gc():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_pauses_end_with_the_last(gc_state: None) -> None:
    gc.enable()
    outer = paused_gc()
    inner = paused_gc()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # the first to start ends first
    assert not gc.isenabled()
    inner.__exit__(None, None, None)
    assert gc.isenabled()


def test_the_collector_comes_back_when_the_replay_fails(gc_state: None) -> None:
    gc.enable()
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError("replay failed")
    assert gc.isenabled()
