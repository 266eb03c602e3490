"""``bench scale``'s bulk fill stores what ``Store.capture`` stores.

The per-layout bench (``memstore/bench/scale_db.py``) fills its stores with
``bulk_capture``: the same ``l0.captured`` events, several captures per
transaction. Its figures stand for capture's stored state only if every
table ends up the same, which this checks row by row on two stores with the
same clock (only the events' random ids may differ)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memstore.bench.capture_search import text_pool
from memstore.bench.scale_db import Layout, bulk_capture, calls, parse_layouts
from memstore.config import Settings
from memstore.db.driver import sqlite_module
from memstore.store import Store
from tests.pipeline_support import FakeClock

SETTINGS = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


def _tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn: Any = sqlite_module().connect(str(path))
    try:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        out = {}
        for name in names:
            if name.endswith(("_fts_data", "_fts_idx")):
                # FTS5's segment b-trees depend on the transactions that wrote
                # them; what they index is compared through fts5vocab below.
                continue
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{name}")')]
            # The event id is random (uuid4); everything else must match.
            keep = [c for c in cols if not (name == "events" and c == "event_id")]
            select = ", ".join(f'"{c}"' for c in keep) or "*"
            out[name] = sorted(conn.execute(f'SELECT {select} FROM "{name}"').fetchall(), key=repr)
        for fts in [n.removesuffix("_data") for n in names if n.endswith("_fts_data")]:
            vocab = f'temp."v_{fts}"'
            conn.execute(f"CREATE VIRTUAL TABLE {vocab} USING fts5vocab(main, {fts}, instance)")
            out[f"vocab {fts}"] = conn.execute(f"SELECT * FROM {vocab}").fetchall()
        return out
    finally:
        conn.close()


def test_bulk_capture_stores_what_capture_stores(tmp_path: Path) -> None:
    layout = Layout(3, 45)  # sessions of 20, 20 and 5 messages per user
    pool = text_pool(50, seed=7)
    one, bulk = tmp_path / "capture.db", tmp_path / "bulk.db"
    with Store.open(one, settings=SETTINGS, clock=FakeClock()) as store:
        for user, session, msgs in calls(layout, pool):
            store.capture(user, session, msgs)
    with Store.open(bulk, settings=SETTINGS, clock=FakeClock()) as store:
        assert bulk_capture(store, calls(layout, pool), per_transaction=4) == layout.messages
        hits = store.search_conversations("u0001", pool[3], strategy="keyword")
    a, b = _tables(one), _tables(bulk)
    assert a.keys() == b.keys()
    assert len(a["events"]) == 9 and len(a["l0_messages"]) == layout.messages
    for name in a:
        assert a[name] == b[name], name
    assert hits and all(h.user_id == "u0001" for h in hits)


def test_a_repeated_bulk_fill_stores_and_counts_nothing(tmp_path: Path) -> None:
    """The build checks the count it returns against the layout."""
    pool = text_pool(50, seed=7)
    with Store.open(tmp_path / "x.db", settings=SETTINGS) as store:
        assert bulk_capture(store, calls(Layout(2, 30), pool)) == 60
        assert bulk_capture(store, calls(Layout(2, 30), pool)) == 0
        assert store.event_count() == 4


def test_layouts_parse() -> None:
    assert parse_layouts("100x1000,1x100000") == [Layout(100, 1000), Layout(1, 100_000)]
    assert parse_layouts("500") == [Layout(1, 500)]
    for bad in ("x10", "10x", "0x5", "ax1", ""):
        with pytest.raises(ValueError):
            parse_layouts(bad)
