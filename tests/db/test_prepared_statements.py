"""The statements capture, indexing and search run again and again stay prepared.

The SQLite memstore loads re-prepares a statement on every run when its planner
read a bound value (a ``LIMIT ?``, for one), which costs more than running it.
SQLite's ``sqlite_stmt`` table counts the runs and re-preparations of each
statement a connection holds; after many captures, indexer passes and searches,
none of the repeated statements may have been re-prepared on every run.

The driver's own statement cache (sqlean.py and pysqlite3 keep the one of the
sqlite3 module before Python 3.11) admits no new statement once it is full, so
memstore's statement texts must come from a small set (lists of values as
padded placeholders, never written into the text) and the cache must hold them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from memstore import Settings
from memstore.db import migrate
from memstore.db.sqlfn import in_list, in_named, limit
from memstore.errors import InvalidInputError
from memstore.store import Store
from tests import fresh_store

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


def _round(store: Store, r: int) -> None:
    """Captures of several sizes, indexer passes, searches and recall, on
    text and ids of their own for each round ``r``."""
    parts = store.internals
    assert parts.indexer is not None
    for i, size in enumerate([1, 2, 3, 5, 8, 13, 1, 2]):
        msgs = [
            {"role": "user" if j % 2 == 0 else "assistant", "content": f"kiln glaze {r} {i} {j}"}
            for j in range(size)
        ]
        if i % 2:
            msgs[0]["name"] = "Caroline"
        store.capture(f"u{i % 3}", f"s{r}", msgs)
        parts.index_keywords()
        parts.indexer.step("l0", batch=1 + i % 5)
    for user in ("u0", "u1", "u2"):
        for q in (f"kiln glaze {r}", f"what did Caroline say about the glaze {r}?"):
            store.search_conversations(user, q, strategy="keyword")
            store.search_conversations(user, q)
            store.recall(user, q)


def test_statement_texts_come_from_a_small_set(tmp_path: Path, settings: Settings) -> None:
    """Rounds of the same kinds of work on new rows: once the lists of ids
    have reached their longest padded lengths, a round runs no statement text
    an earlier one did not. Ids written into the text made a new statement
    per search and per indexer batch (dozens a round here), each one a new
    entry of the driver's statement cache."""
    texts: list[set[str]] = []

    with Store.open(tmp_path / "m.db", settings=settings) as store:

        def seen(_c: Any, _cur: Any, statement: str, *_a: Any) -> None:
            texts[-1].add(statement)

        event.listen(store.internals.db.engine, "before_cursor_execute", seen)
        for r in range(6):
            texts.append(set())
            _round(store, r)
    new = [len(t - set().union(*texts[:i])) for i, t in enumerate(texts)]
    assert new[0] > 30  # the listener saw the work
    # Lists grow with the data in the first rounds (7 candidates pad to 8,
    # then 9 to 16): a few new lengths, then none.

    assert sum(new[3:]) <= 4, new


def test_hot_statements_stay_in_the_driver_cache(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After creating a store (its migrations run ~140 statements on its first
    connection) and varied work, a capture's statements are each one prepared
    statement that ran for every capture: with the driver's default cache of
    128 each capture prepared its ~14 statements again (about a third of its
    CPU)."""
    # The real migrations, not the suite's copy of a migrated file.
    monkeypatch.setattr(migrate, "ensure_current", fresh_store._real_ensure_current)
    captures = 40
    # With the background indexer, as a store opens by default.
    with Store.open(tmp_path / "m.db", settings=settings.replace(background_indexer=True)) as store:
        _round(store, 0)
        for i in range(captures):
            store.capture_turn(f"u{i % 3}", "s", f"pottery class {i}", f"noted {i}")
        with store.internals.db.write() as conn:
            runs = [
                int(r[0])
                for r in conn.exec_driver_sql(
                    "SELECT run FROM sqlite_stmt WHERE sql LIKE 'INSERT INTO events %'"
                )
            ]
    assert runs and max(runs) >= captures, runs


def test_in_list_pads_to_a_power_of_two() -> None:
    assert in_list([7]) == ("?", [7])
    assert in_list([1, 2, 3]) == ("?,?,?,?", [1, 2, 3, 3])
    marks, values = in_list(list(range(500)))
    assert marks.count("?") == len(values) == 512
    assert set(values) == set(range(500))
    assert {in_list(list(range(n)))[0].count("?") for n in range(1, 1025)} == {
        1 << k for k in range(11)
    }
    assert in_named(["a", "b", "c"], "i") == (
        ":i0,:i1,:i2,:i3",
        {"i0": "a", "i1": "b", "i2": "c", "i3": "c"},
    )
    with pytest.raises(InvalidInputError, match="at least one"):
        in_list([])
