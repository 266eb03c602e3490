"""Concurrent writers (threads of one store, separate processes) and the mixed
load: capturing threads and processes, a searcher and the pipeline at once,
with every write transaction of this process timed to find what holds the
write lock longest."""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memstore.bench.chaos_child import child_settings
from memstore.bench.chaos_kill import kill, read_acks, spawn, stored_ids, wait_ready
from memstore.bench.metrics import percentile
from memstore.config import Settings
from memstore.store import Store


def _ms(values: list[float], q: float) -> float:
    return round(percentile(values, q) * 1000, 1) if values else 0.0


def _check(store: Store, users: list[str], acked: list[str]) -> dict[str, int]:
    ids: list[str] = []
    for u in users:
        ids += stored_ids(store, u)
    counts = Counter(ids)
    return {
        "lost": len(set(acked) - set(counts)),
        "duplicates": sum(c - 1 for c in counts.values()),
    }


def _capture_threads(
    store: Store, n: int, per: int, stop: threading.Event | None = None, tag: str = "t"
) -> tuple[list[threading.Thread], list[str], list[float], list[str]]:
    acked: list[str] = []
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def work(k: int) -> None:
        for j in range(per):
            if stop is not None and stop.is_set():
                return
            mid = f"{tag}{k}-{j}"
            msg = {
                "role": "user",
                "content": f"I like topic {j % 50} and I am thread {k}",
                "id": mid,
            }
            t0 = time.perf_counter()
            try:
                store.capture(f"{tag}{k}", f"s{j % 3}", [msg])
            except Exception as exc:  # counted, never hidden
                with lock:
                    errors.append(type(exc).__name__)
                continue
            with lock:
                lat.append(time.perf_counter() - t0)
                acked.append(mid)

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(n)]
    for th in threads:
        th.start()
    return threads, acked, lat, errors


def _proc_results(acks: list[Path]) -> tuple[list[str], list[float], list[str]]:
    acked, lat, errors = [], [], []
    for path in acks:
        for line in read_acks(path):
            head, _, tail = line.partition(" ")
            if head == "error":
                errors.append(tail)
            else:
                acked.append(head)
                lat.append(float(tail))
    return acked, lat, errors


def threads_and_processes(
    work: Path, threads: int = 8, procs: int = 3, per: int = 200
) -> dict[str, Any]:
    """Writers without anything else running: threads of one store, then processes."""
    out: dict[str, Any] = {}
    db = work / "writers.db"
    with Store.open(db, settings=child_settings()) as store:
        ths, acked, lat, errors = _capture_threads(store, threads, per)
        for th in ths:
            th.join()
        out["threads"] = {
            "writers": threads,
            "captures": threads * per,
            "errors": len(errors),
            **_check(store, [f"t{k}" for k in range(threads)], acked),
            "p50_ms": _ms(lat, 50),
            "p99_ms": _ms(lat, 99),
        }
    acks = [work / f"writer{i}.acks" for i in range(procs)]
    children = [spawn("timed_capture", db, a, f"p{i}", per) for i, a in enumerate(acks)]
    for child in children:
        child.wait(timeout=600)
        kill(child)
    p_acked, p_lat, p_err = _proc_results(acks)
    with Store.open(db, settings=child_settings()) as store:
        out["processes"] = {
            "writers": procs,
            "captures": procs * per,
            "errors": len(p_err) + sum(c.returncode != 0 for c in children),
            **_check(store, [f"p{i}" for i in range(procs)], p_acked),
            "p50_ms": _ms(p_lat, 50),
            "p99_ms": _ms(p_lat, 99),
        }
    return out


class WriteTimer:
    """Times every ``db.write()`` transaction of one store; keeps the longest's caller."""

    def __init__(self, store: Store) -> None:
        self.holds: list[float] = []
        self.waits: list[float] = []  # from asking for the write lock to holding it
        self.longest = 0.0
        self.longest_at = ""
        self._lock = threading.Lock()
        original = store.internals.db.write

        @contextlib.contextmanager
        def timed() -> Iterator[Any]:
            asked = time.perf_counter()
            with original() as conn:
                t0 = time.perf_counter()
                self.waits.append(t0 - asked)
                try:
                    yield conn
                finally:
                    self._record(time.perf_counter() - t0)

        setattr(store.internals.db, "write", timed)  # noqa: B010 - an instance override, on purpose

    def _record(self, held: float) -> None:
        with self._lock:
            self.holds.append(held)
            if held <= self.longest:
                return
            self.longest = held
        frames = [
            f
            for f in traceback.extract_stack()[:-3]
            if "/memstore/" in f.filename
            and "/bench/" not in f.filename
            and "contextlib" not in f.filename
            # The group committer's own frames sit between an append and its caller.
            and not f.filename.endswith("groupcommit.py")
            and f.name not in ("_commit_many", "append_grouped")
        ]
        where = " <- ".join(
            f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[-3:][::-1]
        )
        with self._lock:
            if held == self.longest:
                self.longest_at = where


def mixed_load(
    work: Path, seconds: float = 60.0, threads: int = 8, procs: int = 3
) -> dict[str, Any]:
    """8 capturing threads + 3 capturing processes + a searcher + the pipeline."""
    db = work / "mixed.db"
    settings = Settings().replace(embedder="hashing", scheduler=True, background_indexer=True)
    stop = threading.Event()
    runs: list[float] = []
    searches: list[float] = []
    failures: list[str] = []
    with Store.open(db, settings=settings) as store:
        timer = WriteTimer(store)
        acks = [work / f"mixed{i}.acks" for i in range(procs)]
        children = [spawn("timed_capture", db, a, f"p{i}", 10**6) for i, a in enumerate(acks)]
        try:
            for child, a in zip(children, acks, strict=True):
                wait_ready(child, a)
        except BaseException:
            # One child failed to start: the others would capture a million
            # turns each, long after the run (seen: orphans burning CPU for 40 min).
            for child in children:
                kill(child)
            raise
        ths, acked, lat, errors = _capture_threads(store, threads, 10**6, stop)

        def searcher() -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    store.search_conversations("t1", "topic 7")
                except Exception as exc:
                    failures.append(f"search {type(exc).__name__}")
                searches.append(time.perf_counter() - t0)

        def pipeline() -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    store.run_pipeline()
                except Exception as exc:
                    failures.append(f"pipeline {type(exc).__name__}: {exc}")
                runs.append(time.perf_counter() - t0)
                stop.wait(1.0)

        extra = [threading.Thread(target=f, daemon=True) for f in (searcher, pipeline)]
        for th in extra:
            th.start()
        time.sleep(seconds)
        stop.set()
        for child in children:
            kill(child)
        for th in ths + extra:
            th.join(timeout=600)
        p_acked, p_lat, p_err = _proc_results(acks)
        users = [f"t{k}" for k in range(threads)] + [f"p{i}" for i in range(procs)]
        checked = _check(store, users, acked + p_acked)
        holds = timer.holds
        return {
            "seconds": seconds,
            "threads": threads,
            "processes": procs,
            "captures": len(acked) + len(p_acked),
            "errors": len(errors) + len(p_err),
            **checked,
            "thread_p50_ms": _ms(lat, 50),
            "thread_p99_ms": _ms(lat, 99),
            "process_p50_ms": _ms(p_lat, 50),
            "process_p99_ms": _ms(p_lat, 99),
            "search_p50_ms": _ms(searches, 50),
            "search_p99_ms": _ms(searches, 99),
            "pipeline_runs": len(runs),
            "pipeline_longest_s": round(max(runs, default=0.0), 2),
            "write_transactions": len(holds),
            "write_p99_ms": _ms(holds, 99),
            "write_longest_ms": round(timer.longest * 1000, 1),
            "write_longest_at": timer.longest_at,
            "write_wait_p99_ms": _ms(timer.waits, 99),
            "write_wait_longest_ms": round(max(timer.waits, default=0.0) * 1000, 1),
            "other_failures": failures[:5],
        }
