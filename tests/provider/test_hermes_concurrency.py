"""Many provider instances and threads at once, as Hermes' gateway and api_server run them."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agent.memory_provider")

from agent.memory_manager import MemoryManager
from memstore.hermes_provider.stores import shared_stores

from tests.hermes_support import config, hermes_home_fixture, provider_module  # noqa: F401

pytestmark = pytest.mark.hermes

MemstoreProvider = provider_module().MemstoreProvider


def _fds(under: Path | None = None) -> int:
    """Open descriptors of this process; with ``under``, only those on files
    below that folder (another test's background work in the same worker
    opens and closes its own descriptors at any time)."""
    if not os.path.isdir("/proc/self/fd"):
        return 0
    names = os.listdir("/proc/self/fd")
    if under is None:
        return len(names)
    found = 0
    for n in names:
        with contextlib.suppress(OSError):  # closed since the listing
            found += os.readlink(f"/proc/self/fd/{n}").startswith(str(under))
    return found


def _join_linger_timers() -> None:
    # Also the vector-copy loader (memstore.vectors.hot): a transient thread
    # that ends when its queue is empty, not one per instance.
    for t in threading.enumerate():
        if t.name in ("memstore-store-linger", "memstore-hot-vectors"):
            t.join(10)


@pytest.mark.slow
def test_threads_by_instances_lose_no_turn(
    hermes_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Per instance, Hermes runs prefetch, sync and tools on three threads; here
    four instances do that at once against one database."""
    caplog.set_level(logging.WARNING)
    instances, turns = 4, 25
    providers = []
    for i in range(instances):
        p = MemstoreProvider(config())
        p.initialize(f"s{i}", hermes_home=str(hermes_home), user_id=f"u{i % 2}")
        providers.append(p)
    errors: list[BaseException] = []
    start = threading.Barrier(instances * 3)

    def guard(fn: Any) -> Any:
        def run() -> None:
            try:
                start.wait(30)
                fn()
            except BaseException as exc:  # collected and re-raised by the test
                errors.append(exc)

        return run

    def syncer(i: int) -> None:
        for t in range(turns):
            providers[i].sync_turn(f"turn {t} of instance {i}: I like tea {t}", f"noted {t}")

    def prefetcher(i: int) -> None:
        for t in range(turns):
            assert isinstance(providers[i].prefetch(f"tea {t}"), str)

    def tooler(i: int) -> None:
        for t in range(turns):
            out = json.loads(
                providers[i].handle_tool_call(
                    "memstore_conversation_search", {"query": f"tea {t}", "limit": 3}
                )
            )
            assert "error" not in out, out

    threads = [
        threading.Thread(target=guard(lambda i=i, f=f: f(i)), name=f"{f.__name__}-{i}")
        for i in range(instances)
        for f in (syncer, prefetcher, tooler)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
    assert "locked" not in caplog.text.lower() and "failed" not in caplog.text.lower()
    store = providers[0].store
    assert store is not None and all(p.store is store for p in providers)
    for i in range(instances):
        said = store.search_conversations(
            f"u{i % 2}", f"instance {i}", session_id=f"s{i}", limit=20, strategy="keyword"
        )
        assert said  # searchable
    with store._db.read() as conn:
        from sqlalchemy import text

        n = conn.execute(text("SELECT count(*) FROM l0_messages")).scalar_one()
    assert n == instances * turns * 2  # every user and assistant message of every turn
    for p in providers:
        p.shutdown()


def test_a_thousand_instances_without_shutdown_leak_nothing(hermes_home: Path) -> None:
    """Hermes 0.19.0's api_server builds a provider per request and drops it."""
    db = hermes_home / "memstore.db"
    # The pipeline's timer pools grow lazily up to their bound as jobs run;
    # with them off, any new thread here could only belong to an instance.
    keep = MemstoreProvider(config(store_linger_s=60, scheduler=False))
    keep.initialize("warm", hermes_home=str(hermes_home))  # the store is open, as in a server

    def requests(first: int, count: int) -> None:
        for i in range(first, first + count):
            mm = MemoryManager()
            mm.add_provider(MemstoreProvider(config(store_linger_s=60, scheduler=False)))
            mm.initialize_all(
                f"req-{i}",
                platform="api_server",
                hermes_home=str(hermes_home),
                gateway_session_key="caller-1",
            )
            if i % 100 == 0:
                mm.sync_all(f"request {i}", "ok", session_id=f"req-{i}")
                mm.flush_pending(timeout=10)
            del mm  # never shut down

    requests(0, 100)  # warm up: the store starts what it owns (indexer, executors) once
    gc.collect()
    threads_before = {t.ident for t in threading.enumerate()}
    fds_before, ours_before = _fds(), _fds(hermes_home)
    requests(100, 1000)
    gc.collect()
    _join_linger_timers()
    assert shared_stores().refs(db) == 1  # only `keep` still holds it
    assert shared_stores().open_paths() == [db.resolve()]
    extra = [
        t.name
        for t in threading.enumerate()
        if t.ident not in threads_before and not t.name.startswith("mem-sync")
    ]
    assert extra == []  # no thread of ours per instance
    # MemoryManager's own sync executors are Hermes'; they exit with the manager.
    # Our files: at most one more pooled connection (database, -wal, -shm).
    # All descriptors: a per-instance leak of any kind (900 instances) would
    # far exceed this margin, which leaves room for other tests' threads in
    # the same worker (seen in a full run: +4).
    assert _fds(hermes_home) <= ours_before + 3
    assert _fds() <= fds_before + 20
    said = keep.store.search_conversations(
        "api_server:key:caller-1", "request", limit=20, strategy="keyword"
    )
    assert len(said) == 11
    keep.shutdown()


def test_second_instance_joins_the_open_store(hermes_home: Path) -> None:
    first = MemstoreProvider(config())
    first.initialize("a", hermes_home=str(hermes_home))
    opened = first.store
    for _ in range(50):
        p = MemstoreProvider(config())
        p.initialize("b", hermes_home=str(hermes_home))
        assert p.store is opened  # joined, not reopened
        p.shutdown()
    assert shared_stores().refs(hermes_home / "memstore.db") == 1
    first.shutdown()
