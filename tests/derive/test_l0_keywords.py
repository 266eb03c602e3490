"""Keyword rows written after the capture (memstore.derive.messages.keywords).

Whatever mix of captures left their keyword rows to the indexer and captures
that wrote them inline, once nothing waits the store holds exactly what a
replay of the log gives: the same FTS5 index, term repeats, per-user totals
and slots (handed out in order of each user's first message). A process
killed with messages waiting loses none of them: the next capture, indexer
or rebuild, or the next open, writes them, and search finds them meanwhile.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from memstore import Settings
from memstore.bench.snapshot import snapshot
from memstore.db import migrate
from memstore.derive.messages import keywords
from memstore.derive.messages.projection import DEFER_AT_MOST
from memstore.store import Store
from memstore.store_projections import default_projections
from tests.derive_support import fts_index, waiting_messages


def _state(store: Store) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    with store._db.read() as conn:
        return snapshot(store), fts_index(conn)


def _say(store: Store, user: str, text: str, name: str | None = None) -> None:
    message = {"role": "user", "content": text, **({"name": name} if name else {})}
    store.capture(user, "s", [message, {"role": "assistant", "content": f"{text}, noted"}])


def test_deferred_and_inline_captures_equal_a_replay(tmp_path: Path, settings: Settings) -> None:
    with Store.open(tmp_path / "m.db", settings=settings) as store:
        parts = store.internals
        assert parts.defer_keywords(True)
        _say(store, "u1", "the pottery class on Friday")
        _say(store, "u2", "peanut peanut allergy", name="Bob")
        assert waiting_messages(store) == 4
        # An inline capture of a new user writes what waits first: u1 and u2
        # keep slots 1 and 2, as a replay gives them.
        parts.defer_keywords(False)
        _say(store, "u3", "我每天早上喝咖啡")
        assert waiting_messages(store) == 0
        with store._db.read() as conn:
            slots = conn.exec_driver_sql(
                "SELECT user_id, slot FROM l0_user_slots ORDER BY slot"
            ).all()
        assert [tuple(r) for r in slots] == [("u1", 1), ("u2", 2), ("u3", 3)]
        parts.defer_keywords(True)
        _say(store, "u4", "a brand new user while others wait")
        _say(store, "u1", "pottery again, with Caroline", name="Caroline")
        assert waiting_messages(store) == 4
        assert parts.index_keywords() == 4
        captured = _state(store)
        store.rebuild()
        assert _state(store) == captured
        assert waiting_messages(store) == 0


def test_a_rebuild_writes_what_waits(tmp_path: Path, settings: Settings) -> None:
    with Store.open(tmp_path / "m.db", settings=settings) as store:
        _say(store, "u1", "indexed at capture")
        store.internals.defer_keywords(True)
        _say(store, "u1", "a kiwi left to the indexer")
        store.rebuild()
        assert waiting_messages(store) == 0
        hits = store.search_conversations("u1", "kiwi", strategy="keyword")
        assert sorted(h.text for h in hits) == [
            "a kiwi left to the indexer",
            "a kiwi left to the indexer, noted",
        ]


def test_closing_a_store_writes_what_waits(tmp_path: Path, settings: Settings) -> None:
    with_indexer = settings.replace(background_indexer=True)
    with Store.open(tmp_path / "m.db", settings=with_indexer) as store:
        assert store.internals.defer_keywords(True)  # what the running indexer set
        _say(store, "u1", "captured right before closing")
    with Store.open(tmp_path / "m.db", settings=settings) as store:
        assert waiting_messages(store) == 0


def test_messages_waiting_when_the_process_dies_are_not_lost(
    tmp_path: Path, settings: Settings
) -> None:
    db = tmp_path / "m.db"
    with Store.open(db, settings=settings) as store:
        _say(store, "u1", "before the crash")
    child = textwrap.dedent(
        f"""
        import os
        from memstore import Settings
        from memstore.store import Store
        s = Store.open({str(db)!r}, settings=Settings().replace(
            embedder="hashing", scheduler=False, background_indexer=False))
        s.internals.defer_keywords(True)
        s.capture("u1", "s", [{{"role": "user", "content": "the quokka crash test"}}])
        s.capture("u9", "s", [{{"role": "user", "content": "a quokka of another user"}}])
        os._exit(0)  # no close: the keyword rows are never written here
        """
    )
    subprocess.run([sys.executable, "-c", child], check=True, timeout=120)
    with Store.open(db, settings=settings) as store:
        # Opening catches up, as it does for the projections.
        assert waiting_messages(store) == 0
        hits = store.search_conversations("u1", "quokka", strategy="keyword")
        assert [h.text for h in hits] == ["the quokka crash test"]
        captured = _state(store)
        store.rebuild()
        assert _state(store) == captured


def test_downgrade_with_messages_waiting_rebuilds_them(
    tmp_path: Path, settings: Settings
) -> None:
    owners = migrate.projection_tables(default_projections())
    db = tmp_path / "m.db"
    with Store.open(db, settings=settings) as store:
        _say(store, "u1", "indexed at capture")
        store.internals.defer_keywords(True)
        _say(store, "u1", "the zebra waits")
        migrate.downgrade(store._db, "0024_int8", owners=owners)
        with store._db.read() as conn:
            names = {n for (n,) in conn.exec_driver_sql("SELECT name FROM projection_checkpoints")}
        assert "l0_messages" not in names  # so the next open replays it
        migrate.upgrade(store._db, owners=owners)
    with Store.open(db, settings=settings) as store:  # rebuilt from the log
        assert waiting_messages(store) == 0
        hits = store.search_conversations("u1", "zebra", strategy="keyword")
        assert sorted(h.text for h in hits) == ["the zebra waits", "the zebra waits, noted"]


def test_the_background_indexer_writes_them(tmp_path: Path, settings: Settings) -> None:
    with_indexer = settings.replace(background_indexer=True)
    with Store.open(tmp_path / "m.db", settings=with_indexer) as store:
        for i in range(5):
            _say(store, f"u{i % 2}", f"turn {i} about the pottery class")
        deadline = time.monotonic() + 60
        while waiting_messages(store) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert waiting_messages(store) == 0
        assert store.internals.background is not None
        assert store.internals.background.last_error is None


def test_a_large_append_writes_its_keyword_rows_at_once(
    tmp_path: Path, settings: Settings
) -> None:
    with Store.open(tmp_path / "m.db", settings=settings) as store:
        assert store.internals.defer_keywords(True)
        many = [{"role": "user", "content": f"imported line {i}"} for i in range(DEFER_AT_MOST + 1)]
        store.capture("u1", "s", many)
        assert waiting_messages(store) == 0
        store.capture("u1", "s", [{"role": "user", "content": "one more"}])
        assert waiting_messages(store) == 1


def _read_and_derive(store: Store) -> tuple[keywords.Waiting, list[tuple[Any, ...]]]:
    with store._db.read() as conn:
        waiting = keywords.read_waiting(conn, keywords.BATCH)
    assert waiting is not None
    return waiting, waiting.derive()


def test_rows_derived_outside_the_lock_are_written_only_if_unchanged(
    tmp_path: Path, settings: Settings
) -> None:
    with Store.open(tmp_path / "m.db", settings=settings) as store:
        parts = store.internals
        parts.defer_keywords(True)
        _say(store, "u1", "the pottery class on Friday")
        waiting, columns = _read_and_derive(store)
        with store._db.write() as conn:
            assert keywords.write_waiting(conn, waiting, columns) == 2
        assert waiting_messages(store) == 0
        # A second write of the same read finds the cursor moved: nothing twice.
        _say(store, "u1", "a second class")
        stale, stale_columns = waiting, columns
        with store._db.write() as conn:
            assert keywords.write_waiting(conn, stale, stale_columns) == 0
        assert parts.index_keywords() == 2
        captured = _state(store)
        store.rebuild()
        assert _state(store) == captured


def test_an_erasure_between_the_read_and_the_write_leaves_no_erased_text(
    tmp_path: Path, settings: Settings
) -> None:
    with Store.open(tmp_path / "m.db", settings=settings) as store:
        parts = store.internals
        _say(store, "u1", "the pottery class")  # ids 1-2, written at capture
        parts.defer_keywords(True)
        _say(store, "u2", "my secret kiwi password")  # ids 3-4, waiting
        stale, columns = _read_and_derive(store)
        store.forget_user("u2")  # the rebuild sets the cursor back to 2
        parts.defer_keywords(True)
        _say(store, "u3", "a plain melon")  # ids 3-4 again, other text
        with store._db.write() as conn:
            assert keywords.write_waiting(conn, stale, columns) == 0
        assert parts.index_keywords() == 2
        with store._db.read() as conn:
            terms = {str(t) for t, *_ in fts_index(conn)}
        assert "melon" in terms
        assert not {"secret", "kiwi", "password"} & terms
        assert store.search_conversations("u3", "kiwi", strategy="keyword") == []
        captured = _state(store)
        store.rebuild()
        assert _state(store) == captured


def test_a_keyword_pass_paces_after_each_batch(tmp_path: Path, settings: Settings) -> None:
    with Store.open(tmp_path / "m.db", settings=settings) as store:
        parts = store.internals
        parts.defer_keywords(True)
        for i in range(100):
            _say(store, f"u{i % 3}", f"glaze firing number {i}")
        assert waiting_messages(store) == 200
        # Told to stop after the first transaction: one batch written, the
        # rest still waiting (and found by search meanwhile).
        assert parts.index_keywords(pace=lambda _started: True) == keywords.BATCH
        assert waiting_messages(store) == 200 - keywords.BATCH
        calls: list[float] = []
        before = time.monotonic()
        done = parts.index_keywords(pace=lambda started: calls.append(started) is not None)
        assert done == 200 - keywords.BATCH and waiting_messages(store) == 0
        # Once per transaction, each given when its batch began.
        assert len(calls) == -(-done // keywords.BATCH)
        assert before <= calls[0] and calls == sorted(calls)
        hits = store.search_conversations("u1", "glaze firing number 97", strategy="keyword")
        assert hits and "97" in hits[0].text


def test_a_bounded_keyword_pass_ends_with_what_waited_when_it_began(
    tmp_path: Path, settings: Settings
) -> None:
    # The background indexer's pass: captures that never pause must not keep
    # it going, or the vector batches that come after it never run.
    with Store.open(tmp_path / "m.db", settings=settings) as store:
        parts = store.internals
        parts.defer_keywords(True)
        for i in range(100):
            _say(store, f"u{i % 3}", f"kiln load number {i}")
        assert waiting_messages(store) == 200
        arrivals = 0

        def capture_more(_started: float) -> bool:
            # Twenty more messages stored after each batch, 600 in all.
            nonlocal arrivals
            if arrivals < 600:
                for _ in range(10):
                    _say(store, "u9", f"late arrival {arrivals}")
                    arrivals += 2
            return False

        done = parts.index_keywords(pace=capture_more, arrived_before=True)
        # The batches that held the 200 that waited; the last one was filled
        # up with messages stored meanwhile.
        assert done == -(-200 // keywords.BATCH) * keywords.BATCH < 200 + arrivals
        assert waiting_messages(store) == 200 + arrivals - done
        # Unbounded, the same pass goes on while messages arrive.
        more = parts.index_keywords(pace=capture_more)
        assert arrivals == 600 and waiting_messages(store) == 0
        assert done + more == 800
