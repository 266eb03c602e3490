"""Keyword search in steady state: ``search_conversations(strategy="keyword")``
for ``bench keyword``'s queries and target users, timed on a second pass in
the same process (the first pass reads every query's pages once, as a
long-running host will have), wall and CPU time of the thread (the
measurement behind BENCHMARKS.md, "Keyword search per user").

Usage: memstore bench keyword-steady STORE [QUERIES] [RESULTS.json]
STORE (a ``bench keyword`` store of 100 users) is copied first. To compare two
code trees, run it with ``PYTHONPATH=<tree>`` for each, alternating, and
compare the RESULTS files (ids and scores per query) byte for byte.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from memstore.bench.capture_search import queries
from memstore.bench.metrics import percentile
from memstore.config import Settings
from memstore.store import Store


def main(argv: list[str]) -> None:
    args = ["memstore bench keyword-steady", *argv]
    src = Path(args[1])
    n = int(args[2]) if len(args) > 2 else 400
    work = Path(tempfile.mkdtemp(prefix="keyword-steady-")) / "store.db"
    shutil.copy(src, work)
    settings = Settings().replace(embedder="none", background_indexer=False, scheduler=False)
    store = Store.open(work, settings=settings)
    qs = queries(n)
    rng = random.Random(5)  # bench keyword's target users
    users = [f"u{rng.randrange(100):04d}" for _ in qs]
    for q, u in zip(qs, users, strict=True):
        store.search_conversations(u, q, limit=10, strategy="keyword")
    wall: list[float] = []
    cpu: list[float] = []
    results = []
    load_before = os.getloadavg()
    for q, u in zip(qs, users, strict=True):
        t0, c0 = time.perf_counter(), time.thread_time()
        hits = store.search_conversations(u, q, limit=10, strategy="keyword")
        cpu.append((time.thread_time() - c0) * 1000)
        wall.append((time.perf_counter() - t0) * 1000)
        results.append([(h.id, h.score) for h in hits])
    store.close()
    print(
        f"{n} queries, second pass: wall p50 {percentile(wall, 50):.3f} p95 "
        f"{percentile(wall, 95):.3f} ms, CPU p50 {percentile(cpu, 50):.3f} p95 "
        f"{percentile(cpu, 95):.3f} ms; load average {load_before} -> {os.getloadavg()}"
    )
    if len(args) > 3:
        Path(args[3]).write_text(json.dumps(results))
