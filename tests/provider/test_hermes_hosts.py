"""The provider's shared-store registry (stores.py) and per-session registry (sessions.py).

The registry parts are host-agnostic; the last tests park real Hermes
MemoryManagers in it, as newer Hermes' api_server does."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from memstore.hermes_provider.sessions import SessionRegistry
from memstore.hermes_provider.stores import SharedStores

from memstore.config import Settings
from memstore.errors import EmbeddingError
from memstore.store import Store
from tests.hermes_support import config, hermes_home_fixture, provider_module  # noqa: F401

pytestmark = pytest.mark.hermes

SETTINGS = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


class Parked:
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.flushed: float | None = None
        self.shut_down_on: str | None = None

    def flush_pending(self, timeout: float) -> bool:
        self.flushed = timeout
        return True

    def shutdown_all(self) -> None:
        self.shut_down_on = threading.current_thread().name


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- SharedStores ------------------------------------------------------------------


def test_shared_store_is_reference_counted(tmp_path: Path) -> None:
    reg = SharedStores(linger_s=0)
    a = reg.acquire(tmp_path / "m.db", SETTINGS)
    b = reg.acquire(tmp_path / "." / "m.db", SETTINGS)  # same file, other spelling
    assert a.store is b.store and reg.refs(tmp_path / "m.db") == 2
    a.release()
    a.release()  # idempotent
    assert reg.refs(tmp_path / "m.db") == 1 and not b.store._closed
    b.release()
    assert reg.refs(tmp_path / "m.db") == 0 and b.store._closed
    c = reg.acquire(tmp_path / "m.db", SETTINGS)  # reopens after the last close
    assert c.store is not b.store
    reg.close_all()
    assert c.store._closed


def test_a_shared_store_loads_its_embedder_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = threading.Event()
    threads: list[str] = []

    def load_embedder(self: Store) -> None:
        threads.append(threading.current_thread().name)
        loaded.set()

    monkeypatch.setattr(Store, "load_embedder", load_embedder)
    reg = SharedStores(linger_s=0)
    lease = reg.acquire(tmp_path / "m.db", SETTINGS)
    try:
        # On a thread of its own, so opening never waits for a model.
        assert loaded.wait(30) and threads == ["memstore-embedder-load"]
    finally:
        lease.release()


def test_an_embedder_that_cannot_load_ahead_leaves_the_store_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried = threading.Event()

    def load_embedder(self: Store) -> None:
        tried.set()
        raise EmbeddingError("no model here")

    monkeypatch.setattr(Store, "load_embedder", load_embedder)
    reg = SharedStores(linger_s=0)
    lease = reg.acquire(tmp_path / "m.db", SETTINGS)
    try:
        assert tried.wait(30)
        lease.store.capture_turn("u", "s", "still here", "yes")
    finally:
        lease.release()


def test_lingering_store_is_reused_then_closed_by_the_timer(tmp_path: Path) -> None:
    reg = SharedStores(linger_s=60)
    a = reg.acquire(tmp_path / "m.db", SETTINGS)
    store = a.store
    a.release()
    assert not store._closed  # lingers for the next request
    b = reg.acquire(tmp_path / "m.db", SETTINGS)
    assert b.store is store
    b.release(linger_s=0.01)
    timers = [t for t in threading.enumerate() if t.name == "memstore-store-linger"]
    for t in timers:
        t.join(10)
    assert store._closed and reg.open_paths() == []


def test_lease_goes_back_when_its_owner_is_collected(tmp_path: Path) -> None:
    import gc

    reg = SharedStores(linger_s=0)

    class Owner:
        pass

    owners = [Owner() for _ in range(5)]
    for o in owners:
        reg.acquire(tmp_path / "m.db", SETTINGS).bind(o)
    assert reg.refs(tmp_path / "m.db") == 5
    del o
    owners.clear()
    gc.collect()
    assert reg.refs(tmp_path / "m.db") == 0
    for t in [t for t in threading.enumerate() if t.name == "memstore-store-linger"]:
        t.join(10)
    assert reg.open_paths() == []


def test_close_all_at_exit_is_bounded(tmp_path: Path) -> None:
    reg = SharedStores(linger_s=60)
    lease = reg.acquire(tmp_path / "m.db", SETTINGS)
    reg.close_all(timeout_s=30)  # what the atexit hook does: each close on a daemon thread
    assert lease.store._closed and reg.open_paths() == []
    lease.release()  # a late release after close_all is harmless


def test_failed_open_leaves_no_entry(tmp_path: Path) -> None:
    reg = SharedStores(linger_s=0)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    from memstore.errors import MemstoreError

    with pytest.raises((MemstoreError, OSError)):
        reg.acquire(blocker / "m.db", SETTINGS)
    assert reg.refs(blocker / "m.db") == 0 and reg.open_paths() == []


# -- SessionRegistry ----------------------------------------------------------------


def test_checkout_is_exclusive() -> None:
    reg: SessionRegistry[Parked] = SessionRegistry(max_size=4)
    a = Parked("s1")
    assert reg.checkout("s1") is None  # nothing parked: build a new one
    reg.checkin(a)
    assert reg.checkout("s1") is a
    assert reg.checkout("s1") is None  # a concurrent request gets its own
    reg.checkin(a)
    assert reg.parked() == {"s1": a}
    reg.close_all()


def test_loser_displaces_and_the_displaced_is_drained() -> None:
    reg: SessionRegistry[Parked] = SessionRegistry(max_size=4, drain_timeout_s=3.0)
    winner, loser = Parked("s1"), Parked("s1")
    reg.checkin(winner)
    reg.checkin(loser)  # both requests ran on s1; the later check-in stays
    assert reg.wait_idle(10)
    assert reg.parked() == {"s1": loser}
    assert winner.flushed == 3.0 and winner.shut_down_on == "memstore-session-evict"
    reg.checkin(loser)  # re-checking the same object in is not a displacement
    assert reg.wait_idle(10) and loser.shut_down_on is None
    reg.close_all()


def test_lru_bound_evicts_least_recently_checked_in() -> None:
    reg: SessionRegistry[Parked] = SessionRegistry(max_size=2)
    a, b, c = Parked("a"), Parked("b"), Parked("c")
    reg.checkin(a)
    reg.checkin(b)
    reg.checkin(reg.checkout("a") or a)  # a is now the most recent
    reg.checkin(c)
    assert reg.wait_idle(10)
    assert set(reg.parked()) == {"a", "c"}
    assert b.shut_down_on and not a.shut_down_on and not c.shut_down_on
    reg.close_all()


def test_idle_ttl_evicts_on_the_next_call() -> None:
    clock = Clock()
    reg: SessionRegistry[Parked] = SessionRegistry(max_size=10, idle_ttl_s=60, clock=clock)
    old, fresh = Parked("old"), Parked("fresh")
    reg.checkin(old)
    clock.now += 50
    reg.checkin(fresh)
    clock.now += 20  # old idle 70 s, fresh 20 s
    assert reg.checkout("nobody") is None
    assert reg.wait_idle(10)
    assert set(reg.parked()) == {"fresh"} and old.shut_down_on
    clock.now += 100
    assert reg.sweep() == 1 and reg.wait_idle(10) and fresh.shut_down_on
    reg.close_all()


def test_eviction_never_blocks_the_caller() -> None:
    release = threading.Event()
    started = threading.Event()
    done: list[str] = []

    def slow_evict(obj: Parked, timeout: float) -> None:
        started.set()
        release.wait(30)
        done.append(obj.session_id)

    reg: SessionRegistry[Parked] = SessionRegistry(max_size=1, evict=slow_evict)
    reg.checkin(Parked("a"))
    reg.checkin(Parked("b"))  # evicts a; returns while a's drain is still running
    assert started.wait(10)
    assert done == [] and set(reg.parked()) == {"b"}
    release.set()
    assert reg.wait_idle(10) and done == ["a"]
    reg.close_all()  # inline: the process is ending
    assert done == ["a", "b"]


def test_failing_shutdown_does_not_stop_other_evictions(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    def evict(obj: Parked, timeout: float) -> None:
        calls.append(obj.session_id)
        if obj.session_id == "bad":
            raise RuntimeError("boom")

    reg: SessionRegistry[Parked] = SessionRegistry(max_size=1, evict=evict)
    for s in ("bad", "x", "y"):
        reg.checkin(Parked(s))
    assert reg.wait_idle(10)
    assert calls == ["bad", "x"] and "boom" in caplog.text
    reg.close_all()


def test_registry_parks_real_hermes_managers(hermes_home: Path) -> None:
    pytest.importorskip("agent.memory_provider")
    from agent.memory_manager import MemoryManager
    from memstore.hermes_provider.stores import shared_stores

    Provider = provider_module().MemstoreProvider

    def build(session: str) -> Any:
        mm = MemoryManager()
        mm.add_provider(Provider(config()))
        mm.initialize_all(session, platform="api_server", hermes_home=str(hermes_home))
        mm.session_id = session  # what the registry keys by (AIAgent carries it)
        return mm

    reg: SessionRegistry[Any] = SessionRegistry(max_size=1)
    first = reg.checkout("s1") or build("s1")
    first.sync_all("I love green tea.", "Noted.", session_id="s1")
    reg.checkin(first)
    again = reg.checkout("s1")
    assert again is first  # the next request reuses the initialised manager
    reg.checkin(again)
    reg.checkin(build("s2"))  # over the bound: s1's manager is drained and shut down
    assert reg.wait_idle(15)
    assert first.providers[0].store is None
    db = hermes_home / "memstore.db"
    assert shared_stores().refs(db) == 1
    reg.close_all()
    assert shared_stores().refs(db) == 0
