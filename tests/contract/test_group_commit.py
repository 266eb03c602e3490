"""Group commit: concurrent captures of one process share a write transaction,
each caller returns once its transaction committed, and a failing request
fails only its own caller — on both backends.

To make the batches deterministic (no timing), the test holds the store's
write transaction while the threads submit: the first capture's transaction
waits for it, the others queue behind that one, and once the test lets go
everything queued commits together.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, event, text

from memstore.derive.messages.events import MessagesCaptured
from memstore.errors import InvalidInputError, StorageError
from memstore.events.log import NewEvent
from memstore.store import Store
from tests.snapshot import snapshot


class Commits:
    """Counts the store's committed write transactions (``Database.write``,
    which every append goes through; read transactions commit too, so the
    engine's commit event would count those as well)."""

    def __init__(self, store: Store) -> None:
        self.n = 0
        self._lock = threading.Lock()
        write = store._db.write

        @contextmanager
        def counted() -> Iterator[Connection]:
            with write() as conn:
                yield conn
            with self._lock:
                self.n += 1

        store._db.write = counted  # type: ignore[method-assign]


def _run_queued(store: Store, calls: list[Callable[[], object]]) -> list[object]:
    """Run ``calls`` on threads while the test holds the write transaction,
    let go once all of them are in the group committer, and return each
    call's result (or the exception it raised)."""
    return _queued_with_futures(store, [], calls)[1]


def _l0_ids(store: Store, user: str) -> list[tuple[str, str]]:
    with store._db.read() as conn:
        rows = conn.execute(
            text(
                "SELECT session_id, message_id FROM l0_messages WHERE user_id = :u "
                "ORDER BY position, message_id"
            ),
            {"u": user},
        ).all()
    return [(r[0], r[1]) for r in rows]


def test_queued_captures_share_one_commit_and_all_survive(store: Store) -> None:
    commits = Commits(store)
    n = 8
    calls: list[Callable[[], object]] = [
        (lambda i=i: store.capture_turn("u", f"s{i}", f"tea number {i}", "noted", turn_id=f"t{i}"))
        for i in range(n)
    ]
    before = commits.n + 1  # the test's own transaction commits on letting go
    results = _run_queued(store, calls)
    assert all(not isinstance(r, Exception) for r in results), results
    # The first capture's transaction (it may hold a few that queued at once)
    # and one for everything queued behind it: two commits for eight captures.
    assert commits.n - before == 2
    assert store._kernel.group.batches >= 1
    positions = {r.event_position for r in results}  # type: ignore[union-attr]
    assert len(positions) == n and None not in positions
    stored = _l0_ids(store, "u")
    assert sorted(stored) == sorted((f"s{i}", f"t{i}:{j}") for i in range(n) for j in (0, 1))
    before_rebuild = snapshot(store)
    store.rebuild()
    assert snapshot(store) == before_rebuild


def test_a_message_captured_twice_in_one_batch_is_stored_once(store: Store) -> None:
    calls: list[Callable[[], object]] = [
        (lambda: store.capture("u", "s1", [{"role": "user", "content": "same", "id": "m1"}]))
        for _ in range(5)
    ]
    results = _run_queued(store, calls)
    stored = [r.stored for r in results]  # type: ignore[union-attr]
    assert sorted(stored) == [[], [], [], [], ["m1"]]
    assert all(r.duplicates == ["m1"] for r in results if not r.stored)  # type: ignore[union-attr]
    assert _l0_ids(store, "u") == [("s1", "m1")]


def test_a_capture_build_run_on_its_own_reads_what_is_stored_itself(store: Store) -> None:
    # A build is a plain GroupBuild: run without the batch's shared read (as
    # any other caller of the kernel would), it still finds the session's
    # stored messages in its own transaction.
    store.capture("u", "s", [{"role": "user", "content": "first", "id": "a"}])
    planned = store._plan_capture(
        "u",
        "s",
        [
            {"role": "user", "content": "first", "id": "a"},
            {"role": "user", "content": "second", "id": "b"},
        ],
        None,
    )
    with store._db.write() as conn:
        events = list(planned.build(conn, {}))
        assert len(events) == 1
        payload = events[0].payload
        assert isinstance(payload, MessagesCaptured)
        assert [m["id"] for m in payload.messages] == ["b"]
        stored = store._kernel._write(conn, events, store._kernel.hooks)[0]
    result = planned.result(stored)
    assert result.stored == ["b"] and result.duplicates == ["a"]
    assert _l0_ids(store, "u") == [("s", "a"), ("s", "b")]


def test_a_batch_reads_which_of_its_messages_are_stored_in_one_statement(store: Store) -> None:
    store.capture("v", "s", [{"role": "user", "content": "stored before", "id": "old"}])
    long_call = [{"role": "user", "content": f"line {i}", "id": f"w{i}"} for i in range(100)]
    store.capture("w", "s", long_call[:2])
    reads: list[str] = []

    def on_execute(*args: Any) -> None:
        if "message_id IN (" in args[2]:
            reads.append(args[2])

    calls: list[Callable[[], object]] = [
        *[
            (lambda i=i: store.capture_turn(f"u{i}", "s", f"hello {i}", "hi", turn_id="t"))
            for i in range(3)
        ],
        lambda: store.capture(
            "v",
            "s",
            [
                {"role": "user", "content": "stored before", "id": "old"},
                {"role": "user", "content": "new here", "id": "new"},
            ],
        ),
        lambda: store.capture_turn("u0", "s", "hello 0", "hi", turn_id="t"),  # the same call again
        lambda: store.capture("w", "s", long_call),
    ]
    event.listen(store._db.engine, "before_cursor_execute", on_execute)
    try:
        results = _run_queued(store, calls)
    finally:
        event.remove(store._db.engine, "before_cursor_execute", on_execute)
    assert all(not isinstance(r, Exception) for r in results), results
    stored = [r.stored for r in results]  # type: ignore[union-attr]
    dups = [r.duplicates for r in results]  # type: ignore[union-attr]
    assert stored[1] == stored[2] == ["t:0", "t:1"]
    assert sorted([stored[0], stored[4]]) == [[], ["t:0", "t:1"]]  # either may come first
    assert stored[3] == ["new"] and dups[3] == ["old"]
    assert stored[5] == [f"w{i}" for i in range(2, 100)] and dups[5] == ["w0", "w1"]
    assert _l0_ids(store, "u0") == [("s", "t:0"), ("s", "t:1")]
    # At most two transactions (the first capture's, and everything queued
    # behind it), each reading its short calls' ids with one statement, and
    # the long call with its own.
    assert len(reads) <= 3, reads
    assert any(" UNION ALL " in r for r in reads)


def test_a_failing_request_fails_only_its_own_caller(store: Store) -> None:
    def bad(_conn: Any, _claimed: dict[Any, Any]) -> list[NewEvent]:
        # An event the log refuses inside the transaction (bad input).
        return [NewEvent("", MessagesCaptured(session_id="s", messages=[]), user_id="u")]

    calls: list[Callable[[], object]] = [
        (lambda i=i: store.capture_turn("u", "s1", f"turn {i} about tea", turn_id=f"t{i}"))
        for i in range(6)
    ]
    calls.insert(3, lambda: store._kernel.append_grouped(bad))
    results = _run_queued(store, calls)
    assert isinstance(results[3], InvalidInputError)
    good = [r for i, r in enumerate(results) if i != 3]
    assert all(not isinstance(r, Exception) and r.stored for r in good), good  # type: ignore[union-attr]
    assert len(_l0_ids(store, "u")) == 6
    before_rebuild = snapshot(store)
    store.rebuild()
    assert snapshot(store) == before_rebuild


@pytest.mark.slow
def test_many_threads_keep_each_sessions_order(store: Store) -> None:
    threads, turns = 6, 25

    def worker(w: int) -> None:
        for i in range(turns):
            store.capture_turn("u", f"s{w}", f"thread {w} turn {i} about tea", turn_id=f"{i:03d}")

    ts = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    stored = _l0_ids(store, "u")
    assert len(stored) == threads * turns * 1
    for w in range(threads):
        # Capture order is log order within a session.
        mine = [m for s, m in stored if s == f"s{w}"]
        assert mine == [f"{i:03d}:0" for i in range(turns)]
    before_rebuild = snapshot(store)
    store.rebuild()
    assert snapshot(store) == before_rebuild


def test_captures_of_one_session_in_one_batch_queue_its_work_once(store: Store) -> None:
    from memstore.pipeline import queue

    calls: list[Callable[[], object]] = [
        (lambda i=i: store.capture_turn("u", "s1", f"I like tea number {i}", turn_id=f"t{i}"))
        for i in range(5)
    ]
    results = _run_queued(store, calls)
    assert all(not isinstance(r, Exception) for r in results), results
    with store._db.read() as conn:
        items = [w for w in queue.pending(conn, "u") if w.stage == "l1"]
    # The first capture reached the warm-up threshold (one round) on its own;
    # the rest joined the session's unclaimed item instead of adding one each.
    assert [(w.user_id, w.session_id) for w in items] == [("u", "s1")]
    before_rebuild = snapshot(store)
    store.rebuild()
    assert snapshot(store) == before_rebuild


def _msg(i: int, prefix: str = "t") -> list[dict[str, str]]:
    return [{"role": "user", "content": f"tea {i}", "id": f"{prefix}{i}"}]


def _queued_with_futures(
    store: Store, submit: list[Callable[[], Future[Any]]], calls: list[Callable[[], object]]
) -> tuple[list[Future[Any]], list[object]]:
    """``submit`` run on this thread (each returns a future at once, committed
    by the store's writer thread) and the blocking ``calls`` on threads of
    their own, all while the test holds the write transaction; it lets go
    once every one of them is in the group committer. The first submission
    is the writer's batch, waiting for the lock, before the others queue:
    on a busy machine the writer could otherwise wake after they all queued
    and take them in one batch."""
    results: list[object] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as e:  # the test looks at it
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    with store._db.write():
        futures = [s() for s in submit[:1]]
        deadline = time.monotonic() + 60
        while submit and store._kernel.group.pending[0] < 1:
            assert time.monotonic() < deadline, "the writer never took the first submission"
            time.sleep(0.005)
        futures += [s() for s in submit[1:]]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while sum(store._kernel.group.pending) < len(submit) + len(calls):
            assert time.monotonic() < deadline, "the captures never queued"
            time.sleep(0.005)
    for t in threads:
        t.join(60)
    return futures, results


def test_submitted_captures_share_commits_with_waiting_ones(store: Store) -> None:
    commits = Commits(store)
    submit: list[Callable[[], Future[Any]]] = [
        (lambda i=i: store.submit_capture("u", f"a{i}", _msg(i, "a"))) for i in range(4)
    ]
    calls: list[Callable[[], object]] = [
        (lambda i=i: store.capture_turn("u", f"b{i}", f"coffee {i}", turn_id=f"b{i}"))
        for i in range(4)
    ]
    before = commits.n + 1  # the test's own transaction
    futures, results = _queued_with_futures(store, submit, calls)
    done = [f.result(timeout=60) for f in futures]
    assert [r.stored for r in done] == [[f"a{i}"] for i in range(4)]
    assert all(not isinstance(r, Exception) and r.stored for r in results), results  # type: ignore[union-attr]
    # The writer's first batch (the first submission, held up by the test)
    # and one for everything queued behind it, whoever leads it.
    assert commits.n - before == 2
    assert len(_l0_ids(store, "u")) == 8
    before_rebuild = snapshot(store)
    store.rebuild()
    assert snapshot(store) == before_rebuild


def test_a_failing_submission_fails_only_its_own_future(store: Store) -> None:
    def bad(_conn: Any, _claimed: dict[Any, Any]) -> list[NewEvent]:
        return [NewEvent("", MessagesCaptured(session_id="s", messages=[]), user_id="u")]

    submit: list[Callable[[], Future[Any]]] = [
        (lambda i=i: store.submit_capture("u", "s1", _msg(i))) for i in range(5)
    ]
    submit.insert(2, lambda: store._kernel.append_grouped_later(bad))
    futures, _ = _queued_with_futures(store, submit, [])
    with pytest.raises(InvalidInputError):
        futures[2].result(timeout=60)
    good = [f.result(timeout=60) for i, f in enumerate(futures) if i != 2]
    assert [r.stored for r in good] == [[f"t{i}"] for i in range(5)]
    # Bad input raises at once, before anything is queued.
    with pytest.raises(InvalidInputError):
        store.submit_capture("u", "s1", [{"role": "robot", "content": "x"}])


def test_closing_commits_what_was_submitted_then_refuses(store: Store) -> None:
    closed = threading.Event()
    with store._db.write():
        futures = [store.submit_capture("u", "s1", _msg(i)) for i in range(3)]
        closer = threading.Thread(target=lambda: (store._kernel.group.close(), closed.set()))
        closer.start()
        # close waits for the queue, which waits for this transaction.
        assert not closed.wait(0.3)
    closer.join(60)
    assert [f.result(timeout=60).stored for f in futures] == [["t0"], ["t1"], ["t2"]]
    with pytest.raises(StorageError):
        store.submit_capture("u", "s1", [{"role": "user", "content": "late", "id": "late"}])
    assert [m for _, m in _l0_ids(store, "u")] == ["t0", "t1", "t2"]


def test_a_cancelled_wait_neither_stops_the_writer_nor_loses_the_capture(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    with store._db.write():
        futures = [store.submit_capture("u", "s1", _msg(i)) for i in range(3)]
        # A caller that stops waiting (an HTTP client gone): at the store's
        # level and at the kernel's.
        assert futures[1].cancel()
        low = store._kernel.append_grouped_later(lambda _c, _s: [])
        assert low.cancel()
        deadline = time.monotonic() + 60
        while sum(store._kernel.group.pending) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.005)
    assert [futures[i].result(timeout=60).stored for i in (0, 2)] == [["t0"], ["t2"]]
    # The writer still commits what comes next, and the cancelled capture is stored.
    assert store.submit_capture("u", "s1", _msg(3)).result(timeout=60).stored == ["t3"]
    assert [m for _, m in _l0_ids(store, "u")] == ["t0", "t1", "t2", "t3"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def _two_seen(store: Store) -> None:
    """Leave the committer having last committed two captures together.

    While the test holds the write transaction, one capture takes the lead
    and its transaction (alone) waits; only then two more queue. Once the
    test lets go, the first commits, and the next leader takes the two (it
    waits the default moment for a third, which never comes)."""
    group = store._kernel.group
    results: list[object] = []

    def capture(i: int) -> None:
        try:
            results.append(store.capture_turn("w", f"s{i}", f"warm {i}", turn_id=f"w{i}"))
        except Exception as e:  # the test looks at it
            results.append(e)

    def until(state: tuple[int, int]) -> None:
        deadline = time.monotonic() + 60
        while group.pending != state:
            assert time.monotonic() < deadline, f"the committer never reached {state}"
            time.sleep(0.005)

    threads = [threading.Thread(target=capture, args=(i,)) for i in range(3)]
    with store._db.write():
        threads[0].start()
        until((1, 0))  # leading, its transaction waiting for the test's
        for t in threads[1:]:
            t.start()
        until((1, 2))
    for t in threads:
        t.join(60)
    assert len(results) == 3 and all(not isinstance(r, Exception) for r in results), results


def _capture_on_thread(store: Store, session: str) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(store.capture_turn("u", session, f"pasta in {session}", turn_id="t"))
        except Exception as e:  # the test looks at it
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_a_leader_waits_for_as_many_captures_as_the_last_transaction_held(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _two_seen(store)
    # A wait far longer than the test: only the second capture's arrival can
    # end it, and without the wait the first would have committed alone.
    monkeypatch.setattr("memstore.events.groupcommit.GATHER_S", 120.0)
    commits = Commits(store)
    first, out_a = _capture_on_thread(store, "a")
    deadline = time.monotonic() + 60
    while sum(store._kernel.group.pending) < 1:
        assert time.monotonic() < deadline, "the first capture never queued"
        time.sleep(0.005)
    first.join(0.3)
    assert first.is_alive(), "the leader did not wait for the second capture"
    second, out_b = _capture_on_thread(store, "b")
    first.join(60)
    second.join(60)
    assert not first.is_alive() and not second.is_alive()
    assert all(not isinstance(r, Exception) for r in out_a + out_b), out_a + out_b
    assert commits.n == 1  # both in one transaction
    assert sorted(s for s, _ in _l0_ids(store, "u")) == ["a", "b"]


def test_a_lone_caller_waits_once_after_a_burst_and_never_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From a fresh store: the last transaction saw one capture, nobody waits.
    monkeypatch.setattr("memstore.events.groupcommit.GATHER_S", 120.0)
    t0 = time.monotonic()
    for i in range(3):
        store.capture_turn("u", "s", f"alone {i}", turn_id=f"a{i}")
    assert time.monotonic() - t0 < 60
    monkeypatch.setattr("memstore.events.groupcommit.GATHER_S", 0.05)
    _two_seen(store)
    # The first capture after the burst expects a second one, which never
    # comes: it waits the whole (bounded) time, then commits alone...
    monkeypatch.setattr("memstore.events.groupcommit.GATHER_S", 0.5)
    t0 = time.monotonic()
    store.capture_turn("u", "s", "after the burst", turn_id="b0")
    assert time.monotonic() - t0 >= 0.45
    # ...and the next ones expect what it saw: themselves alone.
    monkeypatch.setattr("memstore.events.groupcommit.GATHER_S", 120.0)
    t0 = time.monotonic()
    for i in range(1, 3):
        store.capture_turn("u", "s", f"after the burst {i}", turn_id=f"b{i}")
    assert time.monotonic() - t0 < 60
    assert len(_l0_ids(store, "u")) == 6
