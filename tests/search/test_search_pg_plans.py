"""PostgreSQL plans keyword search well whatever its statistics say.

Two ways it went wrong, 3 and 50 times slower than the right plan:

- the search statement was prepared, and after five runs the server may keep
  a generic plan, which cannot fold the query's ``plainto_tsquery`` calls
  into a constant;
- a user who arrived after the last ANALYZE is estimated at one row, and a
  plain ``m.user_id = $1`` then led the planner to read the user's every
  message once per keyword match. Unfiltered, the search now reads no
  message; with a session filter, each match's by its key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from memstore import Store
from memstore.db import pgwire

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)

_TOPICS = ("pottery class in Lisbon", "sourdough bread recipe", "violin lesson on Friday")


def _fill(store: Store, user: str, turns: int) -> None:
    for i in range(turns):
        topic = _TOPICS[i % len(_TOPICS)]
        store.capture_turn(user, f"s{i // 20}", f"{topic}, note {i}", f"noted {i}")
    store.reindex()  # the keyword rows too, which the indexer writes


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _plans(store: Store, session_id: str | None) -> tuple[list[Any], list[dict[str, Any]]]:
    """The newcomer's hits for one keyword search, and its statement's plan
    nodes that read ``l0_messages``."""
    seen: list[tuple[str, Any]] = []

    def on_execute(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _m: bool) -> None:
        if "ts_rank_cd" in statement:
            seen.append((statement, params))

    engine = store.internals.db.engine
    # A listener also makes every statement go through SQLAlchemy, where it
    # is seen with its values.
    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        hits = store.search_conversations(
            "newcomer", "violin lesson Friday", strategy="keyword", limit=10, session_id=session_id
        )
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
    assert len(seen) == 1
    sql, params = seen[0]
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        (doc,) = raw.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchone()
    plan = (doc if isinstance(doc, list) else json.loads(doc))[0]["Plan"]
    return hits, [n for n in _nodes(plan) if n.get("Relation Name") == "l0_messages"]


def test_a_user_newer_than_the_statistics_is_read_by_key(store: Store) -> None:
    for user in ("alice", "bob", "carol"):
        _fill(store, user, 30)
    with store.internals.db.write() as conn:
        for table in ("l0_messages", "l0_fts"):
            # Statistics from before the newcomer, as after any ANALYZE.
            conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    with store.internals.db.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE l0_messages")
        conn.exec_driver_sql("ANALYZE l0_fts")
        conn.commit()
    _fill(store, "newcomer", 300)

    # Unfiltered, the user's rowid range answers alone: no message is read.
    hits, reads = _plans(store, None)
    assert len(hits) == 10
    assert reads == []
    # A session filter needs each match's row: one by one, by its key.
    hits, reads = _plans(store, "s3")
    assert hits and {h.session_id for h in hits} == {"s3"}
    assert reads
    for node in reads:
        assert node["Node Type"] == "Index Scan", node
        assert node["Index Name"] == "pk_l0_messages", node
        assert "user_id" not in node.get("Index Cond", ""), node


def test_keyword_search_is_never_a_prepared_statement(store: Store) -> None:
    _fill(store, "alice", 12)
    for _ in range(8):  # past the five runs after which a generic plan may stay
        assert store.search_conversations("alice", "pottery Lisbon", strategy="keyword")
        assert store.search_memories("alice", "pottery Lisbon", strategy="keyword") == []
    prepared = [sql for state in pgwire._prepared.values() for sql, _ in state.names]
    assert any(sql.startswith("INSERT") for sql in prepared)  # captures are
    assert not [sql for sql in prepared if "ts_rank_cd" in sql]
