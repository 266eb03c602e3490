"""Idle capture cost: ``capture_turn`` as a default store runs it (its
messages' keyword rows left to the background indexer), as wall and CPU
time of the calling thread, next to a raw SQLite write transaction (BEGIN
IMMEDIATE, one INSERT, COMMIT) on the same file, run right after each
capture so both see the same load; and the statements one capture runs (the
measurement behind BENCHMARKS.md, "Idle capture").

Idle means nothing else runs during the call: the indexer's thread is not
started, and what it would do between two captures (write the keyword rows
the capture left, ``Parts.index_keywords``) runs after each call, outside
its timing, and is reported on its own line. Vectors are not embedded.

The text is conversation-like (``memstore.bench.chattext``: ~245 bytes a
message, a vocabulary of thousands of words, so the word-root cache keeps
meeting new words as it does on a host's messages), each call's text new.
Four kinds of call, TURNS of each, one after another:

- ``turn, same session``: ``capture_turn`` (a user message and a reply) into
  a session the user already has (one session per user, as ``bench search``
  and most of ``bench scale``'s calls do);
- ``one message, same session``: ``capture`` of one message;
- ``turn, new session``: ``capture_turn`` into a session that did not exist
  (the pipeline then also arms the session's timers on its timer thread);
- ``turn, no indexer``: as the first, in a store without a background
  indexer, which writes the keyword rows in the capture's transaction.

Usage: memstore bench capture-idle STORE [TURNS]
STORE is copied first (never opened in place). ``SCHEDULER=1`` runs the
pipeline's timers as a default store does; ``SEED`` picks other texts. To
compare two code trees, run it with ``PYTHONPATH=<tree>`` for each,
alternating.
"""

from __future__ import annotations

import collections
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event

from memstore.bench.chattext import ChatText
from memstore.bench.metrics import percentile
from memstore.config import Settings
from memstore.db.driver import sqlite_module
from memstore.store import Store


def main(argv: list[str]) -> None:
    args = ["memstore bench capture-idle", *argv]
    src = Path(args[1])
    turns = int(args[2]) if len(args) > 2 else 1000
    work = Path(tempfile.mkdtemp(prefix="capture-idle-")) / "store.db"
    shutil.copy(src, work)
    settings = Settings().replace(
        embedder="hashing", background_indexer=False, scheduler=os.environ.get("SCHEDULER") == "1"
    )
    store = Store.open(work, settings=settings)
    with store.internals.db.read() as conn:
        users = max(1, int(conn.exec_driver_sql("SELECT count(*) FROM l0_user_slots").scalar_one()))
    seen: collections.Counter[str] = collections.Counter()
    counting = False

    @event.listens_for(store.internals.db.engine, "before_cursor_execute")
    def _count(_c: Any, _cur: Any, sql: str, *_: Any) -> None:
        if counting and threading.current_thread() is threading.main_thread():
            seen[" ".join(sql.split())[:100]] += 1

    chat = ChatText(seed=int(os.environ.get("SEED", "0")))

    def turn(i: int, kind: str = "same", said_reply: tuple[str, str] | None = None) -> None:
        user = f"u{i % users:04d}"
        said, reply = said_reply or chat.turn()
        if kind == "one":
            store.capture(user, "live-0", [{"role": "user", "content": said}])
            return
        store.capture_turn(user, f"new-{i}" if kind == "new" else "live-0", said, reply)

    parts = store.internals
    parts.defer_keywords(True)
    for i in range(50):
        turn(-1 - i)
        parts.index_keywords()
    counting = True
    turn(-100, "new")
    counting = False
    parts.index_keywords()
    # A statement listener sends memstore.db.rawexec's statements through
    # SQLAlchemy again: none may stay registered while timing.
    event.remove(store.internals.db.engine, "before_cursor_execute", _count)
    ref = sqlite_module().connect(str(work), isolation_level=None, check_same_thread=False)
    ref.execute("PRAGMA synchronous = NORMAL")
    # Checkpoints are not the reference's to run (the store's connections leave
    # them to a thread of their own): a reference commit never pays one.
    ref.execute("PRAGMA wal_autocheckpoint = 0")
    ref.execute("CREATE TABLE IF NOT EXISTS capture_idle_ref (id INTEGER PRIMARY KEY, body TEXT)")
    kinds = {
        "same": "turn, same session",
        "one": "one message, same session",
        "new": "turn, new session",
        "inline": "turn, no indexer",
    }
    times: dict[str, list[float]] = collections.defaultdict(list)
    load_before = os.getloadavg()
    for kind in kinds:
        deferred = parts.defer_keywords(kind != "inline")
        for i in range(turns):
            # The text is made before the timing starts: generating it costs
            # about a tenth of a capture.
            said_reply = chat.turn()
            t0, c0 = time.perf_counter(), time.thread_time()
            turn(i, "same" if kind == "inline" else kind, said_reply)
            times[f"{kind} wall"].append((time.perf_counter() - t0) * 1000)
            times[f"{kind} cpu"].append((time.thread_time() - c0) * 1000)
            if deferred:
                # The indexer's share, between two captures.
                t0, c0 = time.perf_counter(), time.thread_time()
                parts.index_keywords()
                times["keywords wall"].append((time.perf_counter() - t0) * 1000)
                times["keywords cpu"].append((time.thread_time() - c0) * 1000)
            t0, c0 = time.perf_counter(), time.thread_time()
            ref.execute("BEGIN IMMEDIATE")
            ref.execute("INSERT INTO capture_idle_ref (body) VALUES (?)", (f"live turn {i}",))
            ref.execute("COMMIT")
            times["ref wall"].append((time.perf_counter() - t0) * 1000)
            times["ref cpu"].append((time.thread_time() - c0) * 1000)
    store.close()
    print(f"{users} users, {turns} calls of each kind, scheduler {settings.pipeline.scheduler}")
    print(f"statements in one capture_turn into a new session: {sum(seen.values())}")
    for sql, n in seen.most_common():
        print(f"  {n} x {sql}")
    print(f"{'ms':>28}  cpu p50   cpu p99  wall p50  wall p99  cpu p50 / ref")
    ref_cpu = percentile(times["ref cpu"], 50)
    rows = [
        *kinds.items(),
        ("keywords", "after a call: keyword rows"),
        ("ref", "ref: raw write transaction"),
    ]
    for kind, name in rows:
        cpu, wall = times[f"{kind} cpu"], times[f"{kind} wall"]
        print(
            f"{name:>28}  {percentile(cpu, 50):7.3f}  {percentile(cpu, 99):7.3f}  "
            f"{percentile(wall, 50):8.3f}  {percentile(wall, 99):8.3f}  "
            f"{percentile(cpu, 50) / ref_cpu:6.1f}x"
        )
    print(f"load average before {load_before}, after {os.getloadavg()}")
    shutil.rmtree(work.parent)
