"""The store's behaviour, the same on SQLite and PostgreSQL (see conftest)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import exc, text

from memstore import Settings
from memstore.bench.snapshot import snapshot
from memstore.db import migrate
from memstore.derive.messages.events import MessagesCaptured, SessionEnded
from memstore.events.log import NewEvent
from memstore.store import Store, default_projections

# Which projection fills which table: what Store.open tells the migrations.
OWNERS = migrate.projection_tables(default_projections())


def _turns(store: Store) -> None:
    store.capture_turn("alice", "s1", "I like green tea in the morning", "noted", turn_id="a1")
    store.capture_turn("alice", "s1", "I am allergic to peanuts", "I will remember", turn_id="a2")
    store.capture_turn("bob", "s9", "My dog is called Rex", "nice", turn_id="b1")
    store.capture_turn("alice", "s2", "我喜欢喝咖啡", "好的", turn_id="a3")
    store.write_memory("alice", "add", "Alice drinks green tea", type="persona")
    store.write_memory("bob", "add", "Bob has a dog named Rex", type="persona")


def test_capture_assigns_dense_positions_and_reads_back(store: Store) -> None:
    _turns(store)
    events = store.read_events()
    assert [e.position for e in events] == list(range(1, len(events) + 1))
    assert store.event_count() == len(events)
    alice = store.read_events(user_id="alice")
    assert alice and all(e.user_id == "alice" for e in alice)
    texts = [m["text"] for e in alice if e.type == "l0.captured" for m in e.payload.messages]
    assert "我喜欢喝咖啡" in texts and "I am allergic to peanuts" in texts


def test_capture_is_idempotent(store: Store) -> None:
    first = store.capture_turn("alice", "s1", "hello there", "hi", turn_id="t1")
    again = store.capture_turn("alice", "s1", "hello there", "hi", turn_id="t1")
    assert first.stored and not again.stored and again.duplicates
    assert store.event_count() == 1
    ev = NewEvent("x/alice", SessionEnded(session_id="s1"), user_id="alice", idempotency_key="k1")
    a = store.append([ev])
    b = store.append([ev])
    assert not a[0].duplicate and b[0].duplicate and a[0].position == b[0].position
    assert store.event_count() == 2


def test_a_message_id_the_log_holds_twice_is_projected_once(store: Store) -> None:
    # Capture and rebuild carry on past it. The L0 projection's savepoint
    # (memstore.derive.messages.projection): the unique index refuses the second copy,
    # the batch is redone without it, and the transaction carries on
    # (PostgreSQL aborts a transaction on an error unless it is rolled back
    # to the savepoint).
    store.capture("u", "s", [{"role": "user", "content": "hello", "id": "m1"}])
    again = {
        "id": "m1",
        "role": "user",
        "text": "hello again",
        "occurred_at": "2024-01-01T00:00:00.000000Z",
        "truncated": False,
        "original_bytes": 11,
    }
    store.append(
        [NewEvent("l0/u/s", MessagesCaptured(session_id="s", messages=[again]), user_id="u")]
    )
    assert store.capture("u", "s", [{"role": "user", "content": "next", "id": "m2"}]).stored == [
        "m2"
    ]
    for word in ("hello", "next"):
        hits = store.search_conversations("u", word, strategy="keyword")
        assert [h.text for h in hits] == [word]
    store.rebuild()
    assert [h.ref for h in store.search_conversations("u", "next", strategy="keyword")] == ["m2"]


def test_the_database_enforces_idempotency_keys(store: Store) -> None:
    store.append([NewEvent("x/u", SessionEnded(session_id="s"), user_id="u", idempotency_key="k")])
    row = {
        "p": 99,
        "e": "other-event-id",
        "s": "y/u",
        "k": "k",
    }
    insert = text(
        "INSERT INTO events (position, event_id, stream, seq, type, version, user_id, payload, "
        "occurred_at, recorded_at, idempotency_key) VALUES (:p, :e, :s, 1, 't', 1, 'u', '{}', "
        "'2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', :k)"
    )
    try:
        with store._db.write() as conn:
            conn.execute(insert, row)
    except exc.IntegrityError:
        pass
    else:
        raise AssertionError("a second event with the same idempotency key was stored")
    assert store.event_count() == 1


def test_rebuild_equals_incremental(store: Store) -> None:
    _turns(store)
    store.end_session("alice", "s1", timeout_s=0)
    before = snapshot(store)
    assert before["l0_messages"] and before["l1_memories"] and before["l0_fts"]
    store.rebuild()
    assert snapshot(store) == before


def test_users_are_isolated(store: Store) -> None:
    _turns(store)
    for strategy in ("keyword", "hybrid"):
        hits = store.search_conversations("alice", "dog Rex tea", strategy=strategy)
        assert hits and all(h.user_id == "alice" for h in hits)
        assert not any("Rex" in h.text for h in hits)
        mem = store.search_memories("alice", "dog Rex tea", strategy=strategy)
        assert mem and all("Rex" not in h.text for h in mem)
    assert store.search_conversations("alice", "Rex", strategy="keyword") == []
    assert all(e.user_id == "bob" for e in store.read_events(user_id="bob"))


def test_keyword_search_words_roots_and_cjk(store: Store) -> None:
    _turns(store)

    def top(query: str) -> str:
        hits = store.search_conversations("alice", query, strategy="keyword")
        assert hits, query
        return hits[0].text

    assert top("green tea") == "I like green tea in the morning"
    assert top("peanut allergy") == "I am allergic to peanuts"  # word roots
    assert top("咖啡") == "我喜欢喝咖啡"  # CJK bigrams
    assert top("喝") == "我喜欢喝咖啡"  # a lone character: prefix of its bigrams
    assert store.search_memories("alice", "tea", strategy="keyword")[0].text == (
        "Alice drinks green tea"
    )


def test_a_users_keyword_results_do_not_depend_on_other_users(store: Store) -> None:
    """Keyword search reads only the user's rows (their rowid range) and ranks
    them with the user's own figures: other users' messages with the same
    words, captured before and after, change nothing."""
    said = [f"the red kite flew over the hill on day {i}" for i in range(8)]
    said += [f"we cooked red lentil soup, batch {i}" for i in range(5)]
    for u in ("early1", "early2"):
        store.capture(u, "s", [{"role": "user", "content": t} for t in said * 2])
    store.capture("kim", "s", [{"role": "user", "content": t} for t in said])

    def ranked() -> list[list[tuple[str, float]]]:
        return [
            [(h.text, round(h.score, 9)) for h in store.search_conversations(
                "kim", q, strategy="keyword", limit=10)]
            for q in ("red kite hill", "lentil soup", "day 3 kite", "red")
        ]  # fmt: skip

    alone = ranked()
    assert all(alone) and len(alone[0]) == 10
    hits = store.search_conversations("kim", "red", strategy="keyword", limit=50)
    assert len(hits) == len(said) and {h.user_id for h in hits} == {"kim"}
    for u in ("late1", "late2", "late3"):
        store.capture(u, "s", [{"role": "user", "content": t} for t in said + said[:4]])
    assert ranked() == alone
    assert store.search_conversations("nobody", "kite", strategy="keyword") == []


def test_user_text_is_never_query_syntax(store: Store) -> None:
    _turns(store)
    for q in ['"', "AND(", "tea OR", "a:b", "*", "' OR 1=1 --", "\\", "tea & !green | (", "NEAR"]:
        for kind in (store.search_conversations, store.search_memories):
            kind(q, user_id="alice", strategy="keyword")  # must not raise
    hits = store.search_conversations("alice", '"green" AND(tea', strategy="keyword")
    assert hits and hits[0].text == "I like green tea in the morning"


def test_forget_user_leaves_no_content_in_live_tables(store: Store) -> None:
    _turns(store)
    report = store.forget_user("bob")
    assert report.events_removed > 0
    with store._db.read() as conn:
        tables = [
            t
            for t in _tables(conn)
            if not t.startswith(("vec_", "sqlite_", "apscheduler")) and t != "alembic_version"
        ]
        for t in tables:
            for row in conn.execute(text(f'SELECT * FROM "{t}"')).all():
                blob = " ".join(str(v) for v in row)
                assert "Rex" not in blob and "dog" not in blob, (t, row)
                # The user's id survives only in the content-free tombstone.
                assert "bob" not in blob or "erasure.user" in blob, (t, row)
    assert store.search_conversations("bob", "Rex", strategy="keyword") == []
    # Everyone else is untouched.
    assert store.search_conversations("alice", "tea", strategy="keyword")


def _tables(conn: object) -> list[str]:
    from sqlalchemy import inspect

    return list(inspect(conn).get_table_names())


def test_migrations_down_and_up_keep_the_log(target: str, settings: Settings) -> None:
    with Store.open(target, settings=settings) as s:
        _turns(s)
        before = snapshot(s)
        head = migrate.head_revision()
        stale = migrate.downgrade(s._db, "0007", owners=OWNERS)
        assert stale and migrate.current_revision(s._db) == "0007"
        migrate.upgrade(s._db, owners=OWNERS)
        assert migrate.current_revision(s._db) == head
    with Store.open(target, settings=settings) as s:  # rebuilds what the steps touched
        assert snapshot(s) == before
        assert s.search_conversations("alice", "peanut", strategy="keyword")
        migrate.downgrade(s._db, "base", allow_data_loss=True, owners=OWNERS)
        assert migrate.current_revision(s._db) is None
        with s._db.read() as conn:
            assert [t for t in _tables(conn) if t != "alembic_version"] == []
        migrate.upgrade(s._db, owners=OWNERS)
        assert migrate.current_revision(s._db) == head


def test_timers_leave_nothing_in_the_working_directory(
    target: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Armed and fired timers name users and sessions only, never a path made
    from the store's location: a URL must not turn into folders in the cwd."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    with Store.open(target, settings=settings.replace(scheduler=True)) as s:
        s.capture_turn("alice", "s1", "I keep bees on my roof", "Nice")
        s.run_pipeline("alice", wait=True)
    assert os.listdir(work) == []


def test_recall_reads_persona_instructions_and_scenes_alike(store: Store) -> None:
    """The stable part's readers are driver-level SQL (memstore.derive.queries):
    the same persona, standing instructions and navigation on both engines."""
    said = (
        "Please always answer me in British English.",
        "I adopted a golden retriever puppy named Biscuit last spring.",
        "My sister Jana is getting married in Prague in September.",
    )
    for i, line in enumerate(said):
        store.capture("carol", "c1", [{"role": "user", "content": line, "id": f"c{i}"}])
    store.end_session("carol", "c1")
    store.run_pipeline("carol")
    store.write_memory("carol", "add", "Carol plays the cello", type="persona")
    r = store.recall("carol", "How is Biscuit doing?")
    assert "British English" in r.stable
    assert [m.standing for m in r.memories if "British" in m.content] == [True]
    persona = store.get_persona("carol")
    assert persona and "Jana" in persona
    assert persona.splitlines()[0] in r.stable
    # Navigation lists the scenes in list_scenes' order (hottest, then by name).
    names = [s["name"] for s in store.list_scenes("carol")]
    assert len(names) >= 2
    nav = r.stable.split("<scene-navigation>")[1]
    assert [nav.index(f"- {n} (") for n in names] == sorted(nav.index(f"- {n} (") for n in names)
    assert store.recall("nobody", "How is Biscuit doing?").stable == ""


def test_a_speaker_named_only_in_metadata_is_found_and_filtered(store: Store) -> None:
    store.capture(
        "room",
        "s1",
        [
            {
                "role": "user",
                "name": "Ana",
                "content": "I booked the cabin by the lake",
                "id": "r1",
            },
            {"role": "user", "name": "Ben", "content": "I can drive us in my van", "id": "r2"},
            {"role": "user", "name": "Ben", "content": "No shellfish for me please", "id": "r3"},
        ],
    )
    store.reindex()
    for strategy in ("keyword", "hybrid"):
        hits = store.search_conversations("room", "ben", strategy=strategy, limit=2)
        assert {h.ref for h in hits} == {"r2", "r3"}, strategy
    only = store.search_conversations("room", "cabin van", speaker="ANA", limit=5)
    assert [h.ref for h in only] == ["r1"]
    # A rebuild indexes the names again, from the log.
    store.rebuild()
    hits = store.search_conversations("room", "ben", strategy="keyword", limit=2)
    assert {h.ref for h in hits} == {"r2", "r3"}


def test_keyword_search_finds_a_capture_at_once_with_the_indexer_running(
    target: str, backend: str, settings: Settings
) -> None:
    # SQLite leaves the keyword rows to the running indexer and scores the
    # waiting message from its text; PostgreSQL writes them with the message.
    with Store.open(target, settings=settings.replace(background_indexer=True)) as s:
        deferred = s.internals.defer_keywords(True)
        assert deferred == (backend == "sqlite")
        s.capture("alice", "s1", [{"role": "user", "content": "my quokka is called Zed"}])
        hits = s.search_conversations("alice", "quokka", strategy="keyword")
        assert [h.text for h in hits] == ["my quokka is called Zed"]
