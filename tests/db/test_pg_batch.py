"""PostgreSQL: a transaction's writes travel with its next read
(memstore.db.pgbatch) through libpq's pipeline (memstore.db.pgwire).

Every test here is about how statements reach a PostgreSQL server; SQLite
runs each statement where it is written, so there is nothing to check there.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from sqlalchemy import exc, text

from memstore import Store
from memstore.db import pgbatch, pgwire, rawexec
from memstore.db.postgres import PING_AFTER_IDLE_S
from memstore.errors import InvalidInputError, StorageError

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def _table(store: Store) -> None:
    with store.internals.db.write() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS batch_probe (k text PRIMARY KEY, v int)")


def _count(store: Store) -> int:
    with store.internals.db.read() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM batch_probe").scalar_one())


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many statements each round trip to the server carried."""
    sent: list[int] = []
    real = pgwire.run

    def counted(raw: Any, statements: Any, reads: int, **kw: Any) -> Any:
        sent.append(len(statements))
        return real(raw, statements, reads, **kw)

    monkeypatch.setattr(pgwire, "run", counted)
    return sent


def test_a_capture_is_a_few_round_trips(store: Store, trips: list[int]) -> None:
    for i in range(6):  # past the warm-up: a capture that queues no extraction
        store.capture_turn("u", "s", f"turn {i} about the garden", f"noted {i}")
    trips.clear()
    store.capture_turn("u", "s", "the tomatoes are ripe", "lovely")
    # BEGIN + the lock + the log's head, the next message id, the user's
    # slot, the session's pipeline state before the capture, the queued
    # extraction's read (the threshold is reached: nothing extracts here)
    # and the known-ids check; the event, its counts, the message rows
    # (checked new in this transaction: no savepoint), the pipeline's
    # state and COMMIT.
    assert len(trips) <= 2, trips
    assert sum(trips) >= 15  # the statements are all there, only grouped
    hits = store.search_conversations("u", "tomatoes", strategy="keyword")
    assert [h.text for h in hits] == ["the tomatoes are ripe"]


@pytest.fixture(params=["libpq", "psycopg"])
def sender(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a batch goes out: libpq's pipeline directly (memstore.db.pgwire),
    and psycopg's own pipeline mode where pgwire cannot take it."""
    if request.param == "psycopg":
        monkeypatch.setattr(pgwire, "usable", lambda raw: False)
    return str(request.param)


def test_a_kept_write_is_seen_by_the_next_statement_of_any_kind(store: Store, sender: str) -> None:
    _table(store)
    with store.internals.db.write() as conn:
        kept = pgbatch.pending(conn)  # the write lock, sent with the first read
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("a", 1))
        assert pgbatch.pending(conn) == kept + 1
        # Through SQLAlchemy (exec_driver_sql and Core): the write goes first.
        assert conn.exec_driver_sql("SELECT v FROM batch_probe WHERE k = 'a'").scalar() == 1
        assert pgbatch.pending(conn) == 0
        rawexec.run(conn, "UPDATE batch_probe SET v = ? WHERE k = ?", (2, "a"))
        assert conn.execute(text("SELECT v FROM batch_probe")).scalar() == 2
        # Through rawexec: in the same round trip.
        rawexec.run(conn, "UPDATE batch_probe SET v = ? WHERE k = ?", (3, "a"))
        assert rawexec.scalar(conn, "SELECT v FROM batch_probe WHERE k = ?", ("a",)) == 3
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("b", 4))
    assert _count(store) == 2  # the last write went with the COMMIT


def test_a_kept_writes_error_aborts_its_transaction(store: Store, sender: str) -> None:
    _table(store)
    with store.internals.db.write() as conn:
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("a", 1))
    with pytest.raises(exc.IntegrityError), store.internals.db.write() as conn:
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("b", 2))
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("a", 3))
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("c", 4))
    assert _count(store) == 1  # none of the three
    # The connection is fine afterwards, and so is capture.
    assert store.capture_turn("u", "s", "hello", "hi").stored


def test_flush_raises_the_error_where_the_caller_can_roll_back(store: Store, sender: str) -> None:
    _table(store)
    with store.internals.db.write() as conn:
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("a", 1))
        rawexec.run(conn, "SAVEPOINT probe")
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("a", 2))
        with pytest.raises(exc.IntegrityError, match="batch_probe_pkey"):
            rawexec.flush(conn)
        rawexec.run(conn, "ROLLBACK TO SAVEPOINT probe")
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("b", 2))
    assert _count(store) == 2


def test_writes_kept_before_a_rollback_leave_nothing(store: Store, sender: str) -> None:
    _table(store)
    with pytest.raises(RuntimeError), store.internals.db.write() as conn:
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("a", 1))
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("a", 2))  # would fail
        assert pgbatch.pending(conn) >= 2
        raise RuntimeError("the caller gives up")
    assert _count(store) == 0
    # The connection went back to the pool clean, with nothing kept on it.
    for i in range(3):
        assert store.capture_turn("u", "s", f"after {i}", "ok").stored
    with store.internals.db.write() as conn:
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("a", 3))
    assert _count(store) == 1


def test_a_prefetched_answer_is_dropped_by_a_write(store: Store, sender: str) -> None:
    _table(store)
    count = "SELECT count(*) FROM batch_probe"
    with store.internals.db.write() as conn:
        rawexec.prefetch(conn, count)
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("a", 1))
        assert rawexec.scalar(conn, count) == 1  # not the 0 read ahead
        rawexec.prefetch(conn, count)
        assert rawexec.scalar(conn, "SELECT max(v) FROM batch_probe") == 1  # sent with it
        conn.exec_driver_sql("INSERT INTO batch_probe (k, v) VALUES ('b', 2)")
        assert rawexec.scalar(conn, count) == 2  # a statement we cannot see into
        rawexec.prefetch(conn, count)
        assert rawexec.scalar(conn, "SELECT min(v) FROM batch_probe") == 1
        assert rawexec.scalar(conn, count) == 2  # the answer read ahead, still true


def _elsewhere(store: Store, sql: str) -> None:
    """Run ``sql`` on a connection of its own, committed at once."""
    url = store.internals.db.engine.url
    with psycopg.connect(
        host=url.host, port=url.port, user=url.username, dbname=url.database, autocommit=True
    ) as other:
        other.execute(sql)


def test_an_answer_read_ahead_survives_writes_to_other_tables(store: Store) -> None:
    _table(store)
    count = "SELECT count(*) FROM batch_probe"
    with store.internals.db.write() as conn:
        conn.exec_driver_sql("CREATE TEMP TABLE other_probe (k text)")
        rawexec.prefetch(conn, count, reads=("batch_probe",))
        assert rawexec.scalar(conn, "SELECT count(*) FROM other_probe") == 0  # sent with this
        # Committed by someone else after the read went ahead: a read now
        # would see it, the answer read ahead does not.
        _elsewhere(store, "INSERT INTO batch_probe (k, v) VALUES ('theirs', 0)")
        rawexec.run(conn, "INSERT INTO other_probe (k) VALUES (?)", ("x",))
        assert rawexec.scalar(conn, count) == 0  # the answer read ahead
        assert rawexec.scalar(conn, count) == 1  # used once; then read again

        rawexec.prefetch(conn, count, reads=("batch_probe",))
        assert rawexec.scalar(conn, "SELECT count(*) FROM other_probe") == 1
        rawexec.run(conn, "insert into batch_probe (k, v) values (?, ?)", ("a", 1))
        assert rawexec.scalar(conn, count) == 2  # its own table written: read again

        rawexec.prefetch(conn, count, reads=("batch_probe",))
        assert rawexec.scalar(conn, "SELECT count(*) FROM other_probe") == 1
        _elsewhere(store, "INSERT INTO batch_probe (k, v) VALUES ('theirs too', 0)")
        rawexec.run(conn, "SAVEPOINT probe")  # not a plain write: anything may change
        rawexec.run(conn, "RELEASE SAVEPOINT probe")
        assert rawexec.scalar(conn, count) == 3


def test_text_the_driver_cannot_send_is_refused_and_nothing_breaks(
    store: Store, sender: str
) -> None:
    _table(store)
    refused = pytest.raises(InvalidInputError, match="not valid Unicode")
    with refused, store.internals.db.write() as conn:
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("ok", 1))
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("bad\udc80", 2))
    assert _count(store) == 0
    assert store.capture_turn("u", "s", "still here", "yes").stored


def test_prepared_statements_outlive_rollbacks_and_schema_changes(store: Store) -> None:
    # psycopg's own preparing would DEALLOCATE ALL after a ROLLBACK or DDL,
    # taking the statements memstore prepared with it.
    for i in range(3):
        store.capture_turn("u", "s", f"first {i}", "ok")
    _table(store)
    with pytest.raises(exc.IntegrityError), store.internals.db.write() as conn:
        conn.exec_driver_sql("INSERT INTO batch_probe (k, v) VALUES ('a', 1), ('a', 2)")
    with store.internals.db.write() as conn:
        conn.exec_driver_sql("ALTER TABLE batch_probe ADD COLUMN w int")
        conn.exec_driver_sql("DROP TABLE batch_probe")
    for i in range(3):
        assert store.capture_turn("u", "s", f"again {i}", "ok").stored
    assert len(store.search_conversations("u", "again", strategy="keyword")) == 3


def test_a_connection_that_died_in_the_pool_is_replaced(store: Store) -> None:
    store.capture_turn("u", "s", "before", "ok")
    url = store.internals.db.engine.url
    admin = psycopg.connect(
        host=url.host, port=url.port, user=url.username, dbname=url.database, autocommit=True
    )
    with admin:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert killed is not None and killed[0] >= 1
    time.sleep(PING_AFTER_IDLE_S + 0.2)  # idle long enough to be pinged
    assert store.capture_turn("u", "s", "after", "ok").stored
    assert len(store.search_conversations("u", "after", strategy="keyword")) == 1


def test_a_connection_killed_in_a_transaction_fails_it_and_the_store_goes_on(
    store: Store,
) -> None:
    store.capture_turn("u", "s", "before", "ok")
    with pytest.raises(StorageError, match="connection"), store.internals.db.write() as conn:
        pid = rawexec.scalar(conn, "SELECT pg_backend_pid()")
        rawexec.run(conn, "UPDATE l0_user_slots SET docs = docs WHERE user_id = ?", ("u",))
        _elsewhere(store, f"SELECT pg_terminate_backend({int(pid)})")
        rawexec.scalar(conn, "SELECT 1")  # the kept write and this read meet a dead server
    assert store.capture_turn("u", "s", "after", "ok").stored
    assert len(store.search_conversations("u", "after", strategy="keyword")) == 1


def _count_after(store: Store, step: Any) -> tuple[int, int]:
    """A count of batch_probe read ahead, another connection's insert
    committed, ``step(conn)``: what the count's next two reads return."""
    _table(store)
    count = "SELECT count(*) FROM batch_probe"
    with store.internals.db.write() as conn:
        rawexec.prefetch(conn, count)
        assert rawexec.scalar(conn, "SELECT 1") == 1  # sent with this
        _elsewhere(store, "INSERT INTO batch_probe (k, v) VALUES ('theirs', 0)")
        step(conn)
        return rawexec.scalar(conn, count), rawexec.scalar(conn, count)


def test_answers_read_ahead_survive_reads_and_settings(store: Store) -> None:
    def step(conn: Any) -> None:
        # A SELECT through SQLAlchemy and a SET change no table: the answer
        # read ahead is still the one a read here would have given (before
        # the other connection's commit, which a read now would see).
        assert conn.exec_driver_sql("SELECT 2").scalar() == 2
        rawexec.run(conn, "SET LOCAL work_mem = '8MB'")
        rawexec.run(conn, "RESET work_mem")

    assert _count_after(store, step) == (0, 1)  # used once; then read again


def test_a_setting_that_changes_what_reads_see_drops_the_answers(store: Store) -> None:
    # Another search path could name another table: read again.
    def step(conn: Any) -> None:
        rawexec.run(conn, "SET LOCAL search_path = public")

    assert _count_after(store, step) == (1, 1)


def test_a_read_that_was_sent_ahead_is_sent_once(store: Store, trips: list[int]) -> None:
    _table(store)
    count = "SELECT count(*) FROM batch_probe"
    with store.internals.db.write() as conn:
        rawexec.run(conn, "INSERT INTO batch_probe (k, v) VALUES (?, ?)", ("a", 1))
        rawexec.prefetch(conn, count)
        rawexec.prefetch(conn, "SELECT max(v) FROM batch_probe")
        trips.clear()
        assert rawexec.scalar(conn, count) == 1
        # The write lock, the insert, the other read ahead and this read.
        assert trips == [4]
        assert rawexec.scalar(conn, "SELECT max(v) FROM batch_probe") == 1
        assert trips == [4]  # answered from what was read ahead


def test_a_keyword_search_reads_the_users_slot_with_its_forgotten_sources(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.capture_turn("u", "s", "the tomatoes are ripe", "lovely")
    mine: list[int] = []
    real = pgwire.run
    here = threading.get_ident()

    def counted(raw: Any, statements: Any, reads: int, **kw: Any) -> Any:
        if threading.get_ident() == here:  # not the pipeline's timer thread
            mine.append(len(statements))
        return real(raw, statements, reads, **kw)

    monkeypatch.setattr(pgwire, "run", counted)
    hits = store.search_conversations("u", "tomatoes", strategy="keyword")
    assert [h.text for h in hits] == ["the tomatoes are ripe"]
    # The slot and the forgotten sources together; the search; its rows
    # (the COMMIT goes through the driver).
    assert mine == [2, 2, 2], mine
