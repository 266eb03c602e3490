from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from memstore.errors import ConcurrencyError, UnknownEventTypeError, UpcastError
from memstore.events.log import NewEvent
from memstore.store import Store
from tests.helpers_events import Noted, Renamed

pytestmark = pytest.mark.both_backends


def test_append_assigns_positions_and_stream_sequences(store: Store) -> None:
    out = store.append(
        [
            NewEvent("s/a", Noted("one"), user_id="u1"),
            NewEvent("s/b", Noted("two"), user_id="u2"),
            NewEvent("s/a", Noted("three"), user_id="u1"),
        ]
    )
    assert [e.position for e in out] == [1, 2, 3]
    assert [(e.stream, e.seq) for e in out] == [("s/a", 1), ("s/b", 1), ("s/a", 2)]
    stream = store.read_stream("s/a")
    assert [e.payload for e in stream] == [Noted("one"), Noted("three")]
    assert [e.payload for e in store.read_events(user_id="u2")] == [Noted("two")]
    assert [e.position for e in store.read_events(after=1)] == [2, 3]
    assert store.read_events(types=["nope"]) == []


def test_event_ids_are_unique_and_later_events_sort_after_earlier_ones(store: Store) -> None:
    first = store.append([NewEvent("s/a", Noted(str(i)), user_id="u1") for i in range(50)])
    time.sleep(0.003)  # the next millisecond at least
    later = store.append([NewEvent("s/b", Noted("later"), user_id="u1")])
    ids = [e.event_id for e in first + later]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 and i == i.lower() for i in ids)
    assert max(e.event_id for e in first) < later[0].event_id
    # The same ids are stored and read back.
    assert [e.event_id for e in store.read_events()] == ids


def test_occurred_and_recorded_time_are_separate(store: Store) -> None:
    then = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    (e,) = store.append([NewEvent("s", Noted("old"), occurred_at=then)])
    assert e.occurred_at == "2023-05-08T13:56:00.000000Z"
    assert e.recorded_at.startswith(str(datetime.now(UTC).year))


def test_expected_sequence_conflict_raises_concurrency_error(store: Store) -> None:
    store.append([NewEvent("s", Noted("a"), expected_seq=0)])
    store.append([NewEvent("s", Noted("b"), expected_seq=1)])
    with pytest.raises(ConcurrencyError, match=r"expected to append at version 1"):
        store.append([NewEvent("s", Noted("c"), expected_seq=1)])
    # the failed append wrote nothing, not even part of its batch
    with pytest.raises(ConcurrencyError):
        store.append([NewEvent("t", Noted("x")), NewEvent("s", Noted("c"), expected_seq=0)])
    assert len(store.read_events()) == 2


def test_unique_stream_sequence_is_enforced_by_the_database(store: Store) -> None:
    store.append([NewEvent("s", Noted("a"))])
    with store._db.write() as conn, pytest.raises(Exception, match=r"(?i)unique constraint"):
        conn.execute(
            text(
                "insert into events(position,event_id,stream,seq,type,version,user_id,payload,"
                "occurred_at,recorded_at) values (99,'x','s',1,'test.noted',1,'','{}','','')"
            )
        )


def test_idempotency_key_returns_original_and_writes_nothing(store: Store) -> None:
    (first,) = store.append([NewEvent("s", Noted("a"), idempotency_key="msg-1")])
    (again,) = store.append([NewEvent("s", Noted("different"), idempotency_key="msg-1")])
    assert again.duplicate and again.position == first.position
    assert again.payload == Noted("a")
    # twice in one batch, too
    out = store.append(
        [
            NewEvent("s", Noted("b"), idempotency_key="k2"),
            NewEvent("s", Noted("b"), idempotency_key="k2"),
        ]
    )
    assert [e.duplicate for e in out] == [False, True]
    assert len(store.read_events()) == 2


def test_upcaster_reads_version_1_as_version_2(store: Store) -> None:
    with store._db.write() as conn:
        conn.execute(
            text(
                "insert into events(position,event_id,stream,seq,type,version,user_id,payload,"
                "occurred_at,recorded_at) values (1,'e1','s',1,'test.renamed',1,'',:p,'','')"
            ),
            {"p": json.dumps({"name": "Ada Lovelace"})},
        )
    (e,) = store.read_events()
    assert e.payload == Renamed(first="Ada", last="Lovelace")
    assert e.version == 2


def test_unknown_type_and_future_version_are_clear_errors(store: Store) -> None:
    with store._db.write() as conn:
        conn.execute(
            text(
                "insert into events(position,event_id,stream,seq,type,version,user_id,payload,"
                "occurred_at,recorded_at) values (1,'e1','s',1,'martian.event',1,'','{}','','')"
            )
        )
    with pytest.raises(UnknownEventTypeError, match=r"martian\.event"):
        store.read_events()
    with store._db.write() as conn:
        conn.execute(text("delete from events"))
        conn.execute(
            text(
                "insert into events(position,event_id,stream,seq,type,version,user_id,payload,"
                "occurred_at,recorded_at) values (1,'e1','s',1,'test.noted',7,'','{}','','')"
            )
        )
    with pytest.raises(UpcastError, match="newer than this code"):
        store.read_events()


def test_threads_append_concurrently_without_loss(store: Store) -> None:
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(50):
                store.append([NewEvent("shared", Noted(f"{i}-{j}"), user_id=f"u{i}")])
        except BaseException as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    evs = store.read_stream("shared")
    assert [e.seq for e in evs] == list(range(1, 301))


_CHILD = """
import sys
from memstore import Settings
from memstore.events.log import NewEvent
from memstore.store import Store
sys.path.insert(0, {root!r})
from tests.helpers_events import Noted
s = Store.open({path!r}, settings=Settings().replace(scheduler=False, embedder="none"))
for j in range(200):
    s.append([NewEvent("shared", Noted("p{i}-%d" % j), user_id="p{i}")])
s.close()
"""


@pytest.mark.slow  # several real interpreters, each importing memstore
def test_processes_append_to_the_same_file_without_lock_errors(target: str) -> None:
    root = str(Path(__file__).resolve().parents[2])
    Store.open(target).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD.format(root=root, path=str(target), i=i)],
            stderr=subprocess.PIPE,
            cwd=root,
        )
        for i in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    with Store.open(target) as s:
        evs = s.read_stream("shared")
        assert len(evs) == 600
        assert [e.seq for e in evs] == list(range(1, 601))
        counts = {
            (r.type, r.user_id): r.n
            for r in s._db.engine.connect().execute(text("select * from event_counts"))
        }
        assert counts == {("test.noted", f"p{i}"): 200 for i in range(3)}


def test_rolled_back_append_does_not_leave_stale_stream_heads(store: Store) -> None:
    store.append([NewEvent("s", Noted("a"))])
    with pytest.raises(RuntimeError), store._db.write() as conn:
        store._log.append(conn, [NewEvent("s", Noted("b")), NewEvent("s", Noted("c"))])
        raise RuntimeError("abort")
    # another writer (a second store on the same file) takes the same positions
    with Store.open(store.path, settings=store.settings) as other:
        other.append([NewEvent("t", Noted("x")), NewEvent("t", Noted("y"))])
    store.append([NewEvent("s", Noted("d"))])
    assert [e.seq for e in store.read_stream("s")] == [1, 2]


def test_a_read_event_is_the_event_that_was_appended(store: Store) -> None:
    """Decoding fills a StoredEvent's fields without its __init__ (for speed);
    what comes back must be indistinguishable from what append returned."""
    out = store.append(
        [
            NewEvent(
                "s/a",
                Noted("one"),
                user_id="u1",
                idempotency_key="k1",
                causation_id="c1",
                correlation_id="r1",
            ),
            NewEvent("s/b", Noted("two"), user_id="u2"),
        ]
    )
    back = store.read_events()
    assert back == out
    assert [vars(e) for e in back] == [vars(e) for e in out]
    assert [list(vars(e)) for e in back] == [list(vars(e)) for e in out]  # same key order
    assert [repr(e) for e in back] == [repr(e) for e in out]
    assert [hash(e) for e in back] == [hash(e) for e in out]
    with pytest.raises(AttributeError):
        back[0].seq = 5  # type: ignore[misc]
    assert store.append([NewEvent("s/a", Noted("one"), idempotency_key="k1")])[0].duplicate


@pytest.mark.parametrize(
    "stored",
    ['{"text":"one"}', ' {"text": "one"} ', '{"text":"one"}\n', '{"text":"one"} {}', "{"],
)
def test_payloads_decode_as_json_loads_decodes_them(store: Store, stored: str) -> None:
    """The replay's JSON shortcut accepts and rejects what json.loads does."""
    store.append([NewEvent("s/a", Noted("x"), user_id="u1")])
    with store._db.write() as conn:
        conn.execute(text("UPDATE events SET payload = :p"), {"p": stored})
    try:
        expected: object = Noted(**json.loads(stored))
    except json.JSONDecodeError as e:
        expected = type(e)
    try:
        got: object = store.read_events()[0].payload
    except json.JSONDecodeError as e:
        got = type(e)
    assert got == expected
