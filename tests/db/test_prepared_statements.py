"""The statements capture, indexing and search run again and again stay prepared.

The SQLite memstore loads re-prepares a statement on every run when its planner
read a bound value (a ``LIMIT ?``, for one), which costs more than running it.
SQLite's ``sqlite_stmt`` table counts the runs and re-preparations of each
statement a connection holds; after many captures, indexer passes and searches,
none of the repeated statements may have been re-prepared on every run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memstore import Settings
from memstore.db.sqlfn import limit
from memstore.errors import InvalidInputError
from memstore.store import Store

RUNS = 12


def _reprepared(conn: Any) -> list[tuple[str, int, int]]:
    rows = conn.exec_driver_sql(
        "SELECT sql, run, reprep FROM sqlite_stmt WHERE run >= ? AND reprep >= run - 1",
        (RUNS,),
    ).all()
    return [(" ".join(str(r[0]).split())[:120], int(r[1]), int(r[2])) for r in rows]


def test_repeated_statements_are_not_prepared_again(tmp_path: Path, settings: Settings) -> None:
    with Store.open(tmp_path / "m.db", settings=settings) as store:
        parts = store.internals
        parts.defer_keywords(True)
        for i in range(RUNS + 3):
            user = f"u{i % 2}"
            store.capture_turn(user, "s", f"the pottery class number {i}", f"noted, class {i}")
            parts.index_keywords()
            assert parts.indexer is not None
            parts.indexer.step("l0", batch=1)
            store.search_conversations(user, f"pottery class {i}", strategy="keyword")
            store.recall(user, f"what about the pottery class {i}?")
        db = store.internals.db
        with db.write() as conn:
            held = _reprepared(conn)
            # The virtual table is there: an empty answer means something.
            assert conn.exec_driver_sql("SELECT count(*) FROM sqlite_stmt").scalar_one() > 5
        with db.read() as conn:
            pooled = _reprepared(conn)
        assert held == []
        assert pooled == []


@pytest.mark.parametrize("n", [0, 1, 64, 10**9])
def test_limit_writes_the_number(n: int) -> None:
    assert limit(n) == f"LIMIT {n}"


@pytest.mark.parametrize("bad", [-1, True, 2.0, "5", None, "5; DROP TABLE events"])
def test_limit_refuses_anything_but_a_whole_number(bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="row limit"):
        limit(bad)
