"""The per-turn routes: captures over HTTP are committed by the store's
writer thread with no request thread waiting, recall and search run their
store call on the gateway's turn pool, and the pool outlives no store and
serves no request after shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memstore.config import Settings
from memstore.gateway.deps import NotServing
from memstore.gateway.offload import TURN_THREADS, in_turn_pool, turn_pool
from memstore.store import Store
from tests.gateway_support import Running, running_gateway


def _spy_threads(gw: Running, names: list[str], *methods: str) -> None:
    """Record the thread each of the store's ``methods`` runs on."""
    store = gw.store
    for name in methods:
        real = getattr(store, name)

        def spy(*a: Any, _real: Callable[..., Any] = real, **kw: Any) -> Any:
            names.append(threading.current_thread().name)
            return _real(*a, **kw)

        setattr(store, name, spy)


def _captures_held(
    gw: Running, n: int, user: Callable[[int], str], while_held: Callable[[], None] = lambda: None
) -> list[Any]:
    """``n`` concurrent ``POST /v1/capture`` (message ``m<i>`` of ``user(i)``),
    sent while the test holds the write transaction: every capture reaches
    group commit (the writer leads one batch and waits for it, the rest
    queue) before any commits; ``while_held`` runs then. The responses."""
    store = gw.store
    results: list[Any] = [None] * n

    def post(i: int) -> None:
        message = {"role": "user", "content": f"tea number {i}", "id": f"m{i}"}
        body = {"user_id": user(i), "session_id": "s", "messages": [message]}
        with gw.client() as c:
            results[i] = c.post("/v1/capture", json=body)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(n)]
    with store._db.write():
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while sum(store._kernel.group.pending) < n:
            assert time.monotonic() < deadline, "the captures never met in group commit"
            time.sleep(0.005)
        while_held()
    for t in threads:
        t.join(60)
    return results


def test_concurrent_http_captures_share_commits_on_the_stores_writer(tmp_path: Path) -> None:
    # More than the turn pool has threads: capture routes wait on no thread.
    n = TURN_THREADS + 8
    with running_gateway(tmp_path / "gw.db") as gw:
        blocking: list[str] = []
        _spy_threads(gw, blocking, "capture")
        store = gw.store
        committers: list[str] = []
        group = store._kernel.group
        commit_many = group._commit_many

        def spy(builds: Any) -> Any:
            committers.append(threading.current_thread().name)
            return commit_many(builds)

        group._commit_many = spy
        results = _captures_held(gw, n, lambda i: f"u{i}")
        assert [r.status_code for r in results] == [200] * n
        assert all(r.json()["stored"] == [f"m{i}"] for i, r in enumerate(results))
        assert group.batches >= 1
        # The first batch and everything queued behind it: two transactions.
        assert len(committers) == 2, committers
        assert set(committers) == {"memstore-group-commit"}
        assert blocking == []


def test_recall_and_search_routes_call_the_store_on_the_turn_pool(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "gw.db") as gw:
        names: list[str] = []
        _spy_threads(gw, names, "recall", "search_conversations", "search_memories")
        with gw.client() as c:
            body = {"user_id": "u", "query": "tea", "session_key": "s"}
            assert c.post("/recall", json=body).status_code == 200
            assert c.post("/v1/recall", json={"user_id": "u", "query": "tea"}).status_code == 200
            for layer in ("memories", "conversations"):
                body = {"user_id": "u", "query": "tea", "layer": layer}
                assert c.post("/v1/search", json=body).status_code == 200
            for route in ("/search/memories", "/search/conversations"):
                assert c.post(route, json={"user_id": "u", "query": "tea"}).status_code == 200
        assert len(names) == 6 and all(x.startswith("memstore-turn") for x in names), names


def test_store_errors_keep_their_status_through_the_pool(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "gw.db") as gw, gw.client() as c:
        # The store refuses the role (InvalidInputError, raised on a pool thread).
        body = {"user_id": "u", "session_id": "s", "messages": [{"role": "robot", "content": "x"}]}
        r = c.post("/v1/capture", json=body)
    assert r.status_code == 400
    assert "role" in r.json()["error"]


def test_leaving_the_pool_waits_for_calls_still_running() -> None:
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def slow() -> str:
        started.set()
        release.wait(30)
        finished.append(threading.current_thread().name)
        return "done"

    async def main() -> None:
        async with turn_pool(2):
            task = asyncio.create_task(in_turn_pool(slow))
            await asyncio.to_thread(started.wait, 30)
            task.cancel()  # the request went away; its call runs on
            threading.Timer(0.2, release.set).start()
        # The lifespan closes the store only after this: the call is over.
        assert len(finished) == 1 and finished[0].startswith("memstore-turn")

    asyncio.run(main())


def test_no_pool_outside_the_lifespan_is_not_serving() -> None:
    async def outside() -> None:
        await in_turn_pool(lambda: None)

    with pytest.raises(NotServing):
        asyncio.run(outside())

    async def after() -> None:
        async with turn_pool(1):
            assert await in_turn_pool(lambda x: x + 1, 1) == 2
        await in_turn_pool(lambda: None)

    with pytest.raises(NotServing):
        asyncio.run(after())


def test_stopping_while_captures_wait_for_a_commit_stores_every_one(tmp_path: Path) -> None:
    # SIGTERM semantics: uvicorn stops accepting, lets the requests in flight
    # finish, then the lifespan closes the store. Captures queued behind a
    # held transaction must all commit and be answered on the way out.
    n = 6
    db = tmp_path / "stop.db"
    with running_gateway(db) as gw:

        def stop() -> None:
            gw.server.should_exit = True  # the stop begins while they wait
            time.sleep(0.2)

        results = _captures_held(gw, n, lambda _i: "u", stop)
    assert [r.status_code for r in results] == [200] * n
    settings = Settings().replace(embedder="hashing", scheduler=False)
    with Store.open(db, settings=settings) as reopened:
        ids = {m.message_id for m in reopened.session_messages("u", "s")}
    assert ids == {f"m{i}" for i in range(n)}
