"""Idle capture cost: ``capture_turn`` with the background indexer stopped, as
wall and CPU time of the calling thread, next to a raw SQLite write
transaction (BEGIN IMMEDIATE, one INSERT, COMMIT) on the same file, run right
after each capture so both see the same load; and the statements one capture
runs (the measurement behind BENCHMARKS.md, "Capture and search").

Usage: .venv/bin/python scripts/capture_idle.py STORE [TURNS]
STORE is copied first (never opened in place). ``SCHEDULER=1`` runs the
pipeline's timers as a default store does; ``SESSIONS=k`` spreads the turns
over k sessions per user (1 by default, as ``bench search`` does). To compare
two code trees, run it with ``PYTHONPATH=<tree>`` for each, alternating.
"""

from __future__ import annotations

import collections
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event

from memstore.bench.metrics import percentile
from memstore.config import Settings
from memstore.db.driver import sqlite_module
from memstore.store import Store

src = Path(sys.argv[1])
turns = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
sessions = int(os.environ.get("SESSIONS", "1"))
work = Path(tempfile.mkdtemp(prefix="capture-idle-")) / "store.db"
shutil.copy(src, work)
settings = Settings().replace(
    embedder="hashing", background_indexer=False, scheduler=os.environ.get("SCHEDULER") == "1"
)
store = Store.open(work, settings=settings)
with store.db.read() as conn:
    users = max(1, int(conn.exec_driver_sql("SELECT count(*) FROM l0_user_slots").scalar_one()))
seen: collections.Counter[str] = collections.Counter()
counting = False


@event.listens_for(store.db.engine, "before_cursor_execute")
def _count(_c: Any, _cur: Any, sql: str, *_: Any) -> None:
    if counting and threading.current_thread() is threading.main_thread():
        seen[" ".join(sql.split())[:100]] += 1


def turn(i: int) -> None:
    store.capture_turn(
        f"u{i % users:04d}",
        f"live-{i % sessions}",
        f"live turn {i}: what about the pottery class?",
        f"Noted, turn {i}.",
    )


for i in range(50):
    turn(-1 - i)
counting = True
turn(-100)
counting = False
ref = sqlite_module().connect(str(work), isolation_level=None, check_same_thread=False)
ref.execute("PRAGMA synchronous = NORMAL")
ref.execute("CREATE TABLE IF NOT EXISTS capture_idle_ref (id INTEGER PRIMARY KEY, body TEXT)")
times: dict[str, list[float]] = collections.defaultdict(list)
load_before = os.getloadavg()
for i in range(turns):
    t0, c0 = time.perf_counter(), time.thread_time()
    turn(i)
    times["capture wall"].append((time.perf_counter() - t0) * 1000)
    times["capture cpu"].append((time.thread_time() - c0) * 1000)
    t0, c0 = time.perf_counter(), time.thread_time()
    ref.execute("BEGIN IMMEDIATE")
    ref.execute("INSERT INTO capture_idle_ref (body) VALUES (?)", (f"live turn {i}",))
    ref.execute("COMMIT")
    times["ref wall"].append((time.perf_counter() - t0) * 1000)
    times["ref cpu"].append((time.thread_time() - c0) * 1000)
store.close()
print(f"{users} users, {turns} capture_turn calls, {sessions} session(s) per user")
print(f"statements in one capture_turn: {sum(seen.values())}")
for sql, n in seen.most_common():
    print(f"  {n} x {sql}")
for name, ms in times.items():
    print(f"{name:>14}  p50 {percentile(ms, 50):7.3f} ms  p99 {percentile(ms, 99):7.3f} ms")
ratio = percentile(times["capture cpu"], 50) / percentile(times["ref cpu"], 50)
print(f"capture / raw write transaction, CPU p50: {ratio:.1f}x")
print(f"load average before {load_before}, after {os.getloadavg()}")
