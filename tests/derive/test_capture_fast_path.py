"""The one-capture path's cheaper pieces (idle capture):
statements on the driver connection (``memstore.db.rawexec``), the narrow
read of a session's pipeline state in the capture transaction, and the index
behind the queue's next due time."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, exc

from memstore.config import Settings
from memstore.db import rawexec
from memstore.pipeline import queue
from memstore.pipeline.state import get_session, pending_reached
from memstore.store import Store
from memstore.timeutil import system_clock, timedelta
from tests.backends import Targets

pytestmark = pytest.mark.both_backends


def test_driver_statements_stay_in_the_transaction_and_raise_sqlalchemy_errors(
    store: Store,
) -> None:
    store.capture_turn("alice", "s1", "hello there", "hi")
    with pytest.raises(exc.IntegrityError), store._db.write() as conn:
        rawexec.run(conn, "INSERT INTO l0_user_slots (user_id, slot) VALUES (?, ?)", ("zed", 99))
        assert rawexec.scalar(conn, "SELECT slot FROM l0_user_slots WHERE user_id = ?", ["zed"])
        # alice already has a slot: the primary key refuses a second row.
        rawexec.run_many(
            conn, "INSERT INTO l0_user_slots (user_id, slot) VALUES (?, ?)", [("alice", 100)]
        )
    with store._db.read() as conn:
        # The failed transaction rolled back the statement that had succeeded.
        assert rawexec.first(conn, "SELECT slot FROM l0_user_slots WHERE user_id = 'zed'") is None
        assert rawexec.rows(conn, "SELECT user_id FROM l0_user_slots") == [("alice",)]


def test_a_statement_listener_still_sees_every_capture_statement(store: Store) -> None:
    store.capture_turn("alice", "s1", "first turn", "ok")
    seen: list[str] = []

    def on_execute(*args: Any) -> None:
        seen.append(args[2])

    event.listen(store._db.engine, "before_cursor_execute", on_execute)
    try:
        store.capture_turn("alice", "s1", "second turn", "ok")
    finally:
        event.remove(store._db.engine, "before_cursor_execute", on_execute)
    assert any(s.startswith("INSERT INTO events") for s in seen)
    assert any(s.startswith("INSERT INTO l0_messages") for s in seen)
    assert any("COALESCE((SELECT c.runs FROM l1_cursors" in s for s in seen)
    seen.clear()
    store.capture_turn("alice", "s1", "third turn", "ok")  # no listener: nothing recorded
    assert seen == []


@pytest.mark.parametrize("first", [1, 2, 3, 5])
def test_pending_reached_agrees_with_the_full_session_state(
    new_target: Targets, first: int
) -> None:
    settings = Settings().replace(
        embedder="hashing", scheduler=False, background_indexer=False, warmup=(first,)
    )
    calls: list[list[dict[str, str]]] = [
        [{"role": "assistant", "content": "welcome back"}],  # no round
        [{"role": "user", "content": "one"}, {"role": "assistant", "content": "a"}],
        [{"role": "assistant", "content": "anything else?"}],
        [{"role": "user", "content": "two"}, {"role": "user", "content": "three"}],
        [{"role": "system", "content": "note"}],
        [{"role": "user", "content": "four"}],
        [{"role": "user", "content": "five"}, {"role": "assistant", "content": "b"}],
    ]
    answers = []
    with Store.open(new_target("m.db"), settings=settings) as store:
        for call in calls:
            store.capture("alice", "s1", call)
            with store._db.read() as conn:
                st = get_session(conn, "alice", "s1")
                got = pending_reached(conn, "alice", "s1", settings)
            assert st is not None and got is not None
            assert got == (st.last_capture_position, st.rounds_pending >= first)
            answers.append(got[1])
        with store._db.read() as conn:
            assert pending_reached(conn, "alice", "nope", settings) is None
    # The comparison saw both answers (rounds 0, 1, 1, 3, 3, 4, 5).
    assert answers.count(False) and answers.count(True)


# SQLite only: reads SQLite's EXPLAIN QUERY PLAN output.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_next_run_after_reads_the_partial_index(store: Store) -> None:
    now = system_clock()
    with store._db.write() as conn:
        for i in range(30):
            due = now + timedelta(seconds=100 - i)
            queue.enqueue(conn, f"u{i}", "l1", session_id="s", now=now, run_after=due)
        assert queue.next_run_after(conn) == queue.pending(conn)[29].run_after
        plan = [
            str(r[3])
            for r in rawexec.rows(
                conn,
                "EXPLAIN QUERY PLAN SELECT run_after FROM pipeline_queue "
                "WHERE claimed_by IS NULL ORDER BY run_after LIMIT 1",
            )
        ]
    assert any("ix_pipeline_queue_next" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan


# SQLite only: the LIFO pool of SQLite file connections.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_reads_run_on_the_connection_used_last(store: Store) -> None:
    # Read transactions keep their connection between them (the engine's
    # ``_reader``), so each finds in its page cache what the previous one read.
    with store._db.read() as conn:
        kept = conn.connection.driver_connection
    used = []
    for _ in range(3):
        with store._db.read() as conn:
            used.append(conn.connection.driver_connection)
            rawexec.rows(conn, "SELECT count(*) FROM l0_user_slots")
    assert all(u is kept for u in used)
    # Beyond the kept ones (concurrent or nested reads) the pool hands back
    # the connection returned last; first-in-first-out alternated them.
    first, second = store._db.engine.connect(), store._db.engine.connect()
    a = first.connection.driver_connection
    b = second.connection.driver_connection
    assert a is not b
    first.close()
    second.close()
    for _ in range(3):
        with store._db.engine.connect() as conn:
            assert conn.connection.driver_connection is b


# SQLite only: the one held writer connection of a SQLite file.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_write_transactions_run_on_one_held_connection(store: Store) -> None:
    used = []
    for i in range(3):
        with store._db.write() as conn:
            used.append(conn.connection.driver_connection)
            rawexec.run(
                conn, "INSERT INTO l0_user_slots (user_id, slot) VALUES (?, ?)", (f"p{i}", i)
            )
            # A write inside a write of the same thread gets a pooled
            # connection (and waits for the first one's lock like any writer).
            assert store._db._held_writer() is None
    assert len({id(u) for u in used}) == 1
    with store._db.read() as conn:
        assert conn.connection.driver_connection is not used[0]
        got = rawexec.rows(conn, "SELECT user_id FROM l0_user_slots WHERE user_id LIKE 'p%'")
    assert sorted(r[0] for r in got) == ["p0", "p1", "p2"]
