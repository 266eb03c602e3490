"""No statement on a write path scans a whole vector, FTS or events table
(the indexer's ``DELETE FROM vec0 ... WHERE rowid IN
(...)`` was planned as a full scan of the vector table, 20 ms at 100k rows,
while holding the store's write lock).

Every statement the engine runs during capture, indexing, derivation and
projection catch-up is recorded and re-planned with ``EXPLAIN QUERY PLAN``
on the same data; a plan step that scans ``events``, an FTS5 table, a
vec0 table, ``l0_messages`` or ``vector_quarantine`` (looked up in every
indexer batch) without using a key fails the test. Rebuild and erasure are
whole-table operations by design and are not on this list."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from memstore.store import Store

_GUARDED = re.compile(r"^(events|l[01]_fts|vec_l[01]_[0-9a-f]+|l0_messages|vector_quarantine)$")
_SKIP = ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA", "CREATE", "DROP", "SAVEPOINT", "RELEASE")


@contextmanager
def _recorded(store: Store) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def on_execute(
        _conn: Any, _cursor: Any, statement: str, params: Any, _ctx: Any, many: bool
    ) -> None:
        if not statement.lstrip().upper().startswith(_SKIP):
            seen.append((statement, params[0] if many and params else params))

    event.listen(store._db.engine, "before_cursor_execute", on_execute)
    try:
        yield seen
    finally:
        event.remove(store._db.engine, "before_cursor_execute", on_execute)


@contextmanager
def _traced(store: Store) -> Iterator[list[tuple[str, Any]]]:
    """Statements run on the driver connections themselves, as SQLite expands
    them (keyword search reads through the DB-API connection, bypassing
    SQLAlchemy's events; memstore.search.bm25)."""
    seen: list[tuple[str, Any]] = []

    def on_trace(statement: str) -> None:
        if not statement.lstrip().upper().startswith((*_SKIP, "--")):
            seen.append((statement, None))

    def on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        dbapi_conn.set_trace_callback(on_trace)

    def on_checkin(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.set_trace_callback(None)

    def kept(callback: Any) -> None:
        # Read connections kept between reads are checked out already.
        for conn in getattr(store._db, "_idle", ()):
            conn.connection.driver_connection.set_trace_callback(callback)

    event.listen(store._db.engine, "checkout", on_checkout)
    event.listen(store._db.engine, "checkin", on_checkin)
    kept(on_trace)
    try:
        yield seen
    finally:
        event.remove(store._db.engine, "checkout", on_checkout)
        event.remove(store._db.engine, "checkin", on_checkin)
        kept(None)


def full_scans(detail: str) -> str | None:
    """The guarded table a plan step reads in full, if it does."""
    m = re.match(r"(?:SCAN|SEARCH) (\S+)(?: AS \S+)?(.*)$", detail)
    if m is None or not _GUARDED.match(m.group(1)):
        return None
    table, rest = m.group(1), m.group(2)
    if not detail.startswith("SCAN"):
        return None  # SEARCH: a key or index is used
    if "VIRTUAL TABLE INDEX" not in rest:
        return table  # a plain table read from end to end
    idx = rest.split("VIRTUAL TABLE INDEX", 1)[1].split(":", 1)[1]
    if table.startswith("vec_"):
        # sqlite-vec's plans: 1 = full scan, 2 = rowid point lookup, 3 = KNN.
        return table if idx.startswith("1") else None
    # FTS5: an empty plan string reads every row; M = MATCH, = < > on rowid.
    return table if idx == "" else None


def _plans(store: Store, statements: list[tuple[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    with store._db.engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        for sql, params in statements:
            rows = raw.execute(f"EXPLAIN QUERY PLAN {sql}", params or ()).fetchall()
            out[sql] = [str(r[3]) for r in rows]
    return out


def _write_paths(store: Store, round_: int) -> None:
    for i in range(6):
        store.capture_turn("alice", "s1", f"I moved to Lisbon in May {round_}.{i}", f"Noted {i}")
        store.capture_turn("bob", "s1", f"I like green tea number {round_}.{i}", "ok")
    store.capture("alice", "s2", [{"role": "user", "content": "I am vegetarian", "id": "m-1"}])
    store.capture("alice", "s2", [{"role": "user", "content": "I am vegetarian", "id": "m-1"}])
    store.reindex()
    store.end_session("alice", "s1")
    store.run_pipeline("alice")
    mid = store.write_memory("bob", "add", f"bob drinks green tea, cup {round_}")
    store.reindex()
    assert mid is not None
    store.forget_memory("bob", mid)
    store.catch_up()
    store.reindex()


def test_write_paths_never_scan_vector_fts_or_event_tables(store: Store) -> None:
    # Data first, so the planner sees real tables (and vec0 tables exist).
    _write_paths(store, 1)
    with _recorded(store) as seen:
        _write_paths(store, 2)
    assert len(seen) > 50
    kinds = {s.split()[0].upper() for s, _ in seen}
    assert {"INSERT", "DELETE", "SELECT", "UPDATE"} <= kinds
    assert any(re.search(r'DELETE FROM "vec_l0_', s) for s, _ in seen)
    # The indexer's quarantine look-up runs in every batch.
    assert any("FROM vector_quarantine" in s for s, _ in seen)
    bad = {
        sql: plan
        for sql, plan in _plans(store, seen).items()
        if any(full_scans(step) for step in plan)
    }
    assert bad == {}, "full scans on a write path:\n" + "\n".join(
        f"{sql}\n  -> {plan}" for sql, plan in bad.items()
    )


def test_the_classifier_tells_scans_from_lookups() -> None:
    assert full_scans("SCAN vec_l0_0123abcd VIRTUAL TABLE INDEX 0:1") == "vec_l0_0123abcd"
    assert full_scans("SCAN vec_l0_0123abcd VIRTUAL TABLE INDEX 1:2!___") is None
    assert full_scans("SCAN vec_l1_0123abcd VIRTUAL TABLE INDEX 0:3{___}___]Aa_") is None
    assert full_scans("SCAN l0_fts VIRTUAL TABLE INDEX 0:") == "l0_fts"
    assert full_scans("SCAN l0_fts VIRTUAL TABLE INDEX 0:M2") is None
    assert full_scans("SCAN l1_fts VIRTUAL TABLE INDEX 0:=") is None
    assert full_scans("SCAN events") == "events"
    assert full_scans("SEARCH events USING INTEGER PRIMARY KEY (rowid>?)") is None
    assert full_scans("SCAN l0_messages") == "l0_messages"
    assert full_scans("SEARCH vector_quarantine USING INDEX sqlite_autoindex_x (space=?)") is None
    assert full_scans("SCAN vector_spaces") is None  # not a guarded table (a row per space)


@pytest.mark.parametrize("kind", ["l0", "l1"])
def test_keyword_search_reads_only_the_users_fts_range(store: Store, kind: str) -> None:
    # Every MATCH must carry the user's rowid bounds, so
    # FTS5 reads one user's postings, not every user's (one MATCH per term:
    # memstore.search.bm25, and bm25_memories for memories).
    _write_paths(store, 1)
    for user in ("alice", "bob"):
        store.write_memory(user, "add", f"{user} drinks green tea in Lisbon")
    search = store.search_conversations if kind == "l0" else store.search_memories
    with _traced(store) as seen:
        search("Lisbon green tea", user_id="alice", strategy="keyword")
        search("Lisbon green tea", user_id="bob", strategy="hybrid")
    table = f"{kind}_fts"
    plans = {sql: plan for sql, plan in _plans(store, seen).items() if f"{table} MATCH" in sql}
    # One ranking statement per search (traced with the values bound, so the
    # two users' statements differ in their rowid bounds).
    assert len(plans) == 2
    steps = [
        step
        for plan in plans.values()
        for step in plan
        if step.startswith((f"SCAN {table}", f"SEARCH {table}"))
    ]
    assert len(steps) == 12  # lisbon, green, tea: words and roots, in each search
    for step in steps:
        index = step.split("VIRTUAL TABLE INDEX", 1)[1].split(":", 1)[1]
        assert "M" in index and ">" in index and "<" in index, steps


def test_search_reads_candidate_rows_by_primary_key(store: Store) -> None:
    # The hits' rows (and their low_info flags) are looked up by id. With a
    # plain "user_id = ?" beside the id list SQLite walked the user's whole
    # (user_id, occurred_at) index range instead: every message of the user
    # per search (memstore.search.hits.read_rows).
    _write_paths(store, 1)
    with _traced(store) as seen:
        store.search_conversations("alice", "Lisbon green tea", strategy="keyword")
        store.search_conversations("bob", "Lisbon green tea", strategy="hybrid")
    reads = {
        sql: plan
        for sql, plan in _plans(store, seen).items()
        if re.match(r"SELECT m\.id, m\.message_id", sql)
    }
    assert reads
    for sql, plan in reads.items():
        assert plan == ["SEARCH m USING INTEGER PRIMARY KEY (rowid=?)"], (sql, plan)
