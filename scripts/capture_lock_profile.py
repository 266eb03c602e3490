"""Capture latency with the background indexer working vs stopped, with the
write lock's hold and wait per thread and the indexer's slowest statements
(the measurement behind BENCHMARKS.md, "Capture while the indexer works").

Usage: .venv/bin/python scripts/capture_lock_profile.py N [TURNS]
(ROUNDS=k in the environment repeats the pair). The store of N messages is
built once under /tmp/capture-store-N.db and copied for every run.
"""

from __future__ import annotations

import collections
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, event

from memstore.bench.metrics import percentile
from memstore.bench.scale import _messages, text_pool
from memstore.config import Settings
from memstore.store import Store

N = int(sys.argv[1])
TURNS = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
users = max(1, N // 1000)
settings = Settings().replace(embedder="hashing", scheduler=False)
cache = Path(f"/tmp/capture-store-{N}.db")
if not cache.exists():
    with Store.open(cache, settings=settings) as s:
        s.parts.stop_background()
        for u, sess, msgs in _messages(N, users, text_pool(N, seed=7)):
            s.capture(u, sess, msgs)
        s.reindex()
work = Path(f"/tmp/capture-lock-profile-{N}.db")
for suffix in ("", "-wal", "-shm"):
    Path(f"{work}{suffix}").unlink(missing_ok=True)
shutil.copy(cache, work)

st = Store.open(work, settings=settings)
holds: dict[str, list[float]] = collections.defaultdict(list)
waits: dict[str, list[float]] = collections.defaultdict(list)
stmts: dict[str, list[float]] = collections.defaultdict(list)
real_write = st.db.write


@contextmanager
def timed_write() -> Iterator[Connection]:
    name = threading.current_thread().name
    t0 = time.perf_counter()
    with real_write() as conn:
        t1 = time.perf_counter()
        try:
            yield conn
        finally:
            waits[name].append((t1 - t0) * 1000)
            holds[name].append((time.perf_counter() - t1) * 1000)


st.db.write = timed_write  # type: ignore[method-assign]
local = threading.local()


@event.listens_for(st.db.engine, "before_cursor_execute")
def _before(*_: Any) -> None:
    local.t = time.perf_counter()


@event.listens_for(st.db.engine, "after_cursor_execute")
def _after(_c: Any, _cur: Any, sql: str, *_: Any) -> None:
    if threading.current_thread().name == "memstore-indexer":
        stmts[sql.split("\n")[0][:90]].append((time.perf_counter() - local.t) * 1000)


def _p(xs: list[float], q: float) -> float:
    return percentile(xs, q) if xs else float("nan")


def run(tag: str) -> list[float]:
    for d in (holds, waits, stmts):
        d.clear()
    lat = []
    for i in range(TURNS):
        t0 = time.perf_counter()
        st.capture_turn(f"u{i % users:04d}", tag, f"{tag} turn {i}: the pottery class?", "ok")
        lat.append((time.perf_counter() - t0) * 1000)
    time.sleep(1)
    load = Path("/proc/loadavg").read_text().split()[:3]
    pct = " ".join(f"p{q} {_p(lat, q):.2f}" for q in (50, 95, 99))
    print(f"{tag}: capture {pct}  load {load}")
    for k in holds:
        print(
            f"   {k:20} writes {len(holds[k]):5}  hold p50 {_p(holds[k], 50):.2f} "
            f"p99 {_p(holds[k], 99):.2f} wait p50 {_p(waits[k], 50):.2f} p99 {_p(waits[k], 99):.2f}"
        )
    for sql, xs in sorted(stmts.items(), key=lambda kv: -sum(kv[1]))[:8]:
        print(f"      {sum(xs) / len(xs):7.3f} ms x{len(xs):5}  {sql}")
    return lat


for rnd in range(int(os.environ.get("ROUNDS", "1"))):
    live = run(f"live{rnd}")
    st.parts.stop_background()
    idle = run(f"idle{rnd}")
    st.start_background()
    print("ratio " + " ".join(f"p{q} {_p(live, q) / _p(idle, q):.2f}" for q in (50, 95, 99)))
st.close()
