"""The FTS5 segments one-turn captures leave are merged in short background
steps (memstore.text.fts_tidy), without changing what keyword search finds."""

from __future__ import annotations

import time
from pathlib import Path

from memstore.config import Settings
from memstore.search import bm25
from memstore.store import Store
from memstore.text import fts_tidy

_QUERIES = ("green tea Lisbon", "marathon training", "tea", "number 7")


def _captures(store: Store, n: int) -> None:
    # One write transaction each, as a host captures turns: one FTS5 segment each.
    for i in range(n):
        store.capture_turn(f"u{i % 3}", "s1", f"green tea number {i} in Lisbon", f"marathon {i}")


def _lists(store: Store) -> dict[tuple[str, str], list[tuple[int, float]]]:
    with store._db.read() as conn:
        return {
            (q, u): bm25.keyword_messages(conn, q, u, 50, sole_user_shortcut=False)
            for q in _QUERIES
            for u in ("u0", "u1", "u2")
        }


def _index_rows(store: Store) -> int:
    # l0_fts_idx holds a row per leaf page that starts a term, per segment:
    # fewer segments, fewer rows.
    with store._db.read() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM l0_fts_idx").scalar_one())


def test_tidy_merges_segments_and_keeps_results(store: Store) -> None:
    _captures(store, 150)
    before, rows_before = _lists(store), _index_rows(store)
    steps = fts_tidy.tidy(store._db)
    assert steps > 0
    assert _index_rows(store) < rows_before
    assert _lists(store) == before
    assert fts_tidy.tidy(store._db) == 0  # nothing left to merge
    with store._db.write() as conn:
        conn.exec_driver_sql("INSERT INTO l0_fts(l0_fts, rank) VALUES ('integrity-check', 0)")
        setting = conn.exec_driver_sql("SELECT v FROM l0_fts_config WHERE k = 'usermerge'")
        assert setting.scalar() == fts_tidy.USERMERGE


def test_tidy_stops_when_asked(store: Store) -> None:
    _captures(store, 150)
    assert fts_tidy.tidy(store._db, should_stop=lambda: True) == 0
    assert fts_tidy.tidy(store._db, max_steps=1) == 1


def test_the_background_indexer_tidies_after_captures(db_path: Path, settings: Settings) -> None:
    with Store.open(db_path, settings=settings) as s:  # no background indexer
        _captures(s, 150)
        rows_before = _index_rows(s)
    with Store.open(db_path, settings=settings.replace(background_indexer=True)) as s:
        s.capture_turn("u0", "s2", "one more turn", "ok")  # wakes the indexer
        # Only the indexer's thread merges here; a generous bound for a slow machine.
        deadline = time.monotonic() + 120
        while _index_rows(s) >= rows_before and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _index_rows(s) < rows_before
