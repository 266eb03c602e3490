"""Child processes of ``memstore bench chaos``: each opens the store, does one
kind of work in a loop and appends what it got acknowledged to a file, so the
parent can SIGKILL it at a random moment and check what survived.

Run as ``python -m memstore.bench.chaos_child MODE DB ACKS [ARGS...]``. An ack
line is written (and flushed to the OS) only after the call returned, so a
line in the file means "acknowledged"; the OS keeps it when the process dies.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from memstore.config import Settings
from memstore.store import Store

SECRET = "zebra-quartz-7781"  # the erasure experiment's needle in the file bytes


def child_settings(pipeline: bool = False) -> Settings:
    # The background indexer stays on: it is a second writer inside the process,
    # as in production. Timers only where the experiment is about the pipeline.
    return Settings().replace(embedder="hashing", scheduler=pipeline, background_indexer=True)


def _ack(out: TextIO, line: str) -> None:
    out.write(line + "\n")
    out.flush()


def capture(db: Path, acks: TextIO, user: str, n: int, burst: int) -> None:
    """Capture ``n`` turns in bursts of ``burst`` messages; ack each turn id."""
    with Store.open(db, settings=child_settings()) as store:
        _ack(acks, "ready")
        for i in range(0, n, burst):
            msgs = []
            for j in range(i, min(i + burst, n)):
                msgs.append(
                    {"role": "user", "content": f"{user} turn {j} likes tea", "id": f"{user}-{j}"}
                )
            store.capture(user, f"s{i % 3}", msgs)
            for m in msgs:
                _ack(acks, m["id"])


def threads_capture(db: Path, acks: TextIO, user: str, threads: int) -> None:
    """``threads`` threads capture one turn per call, each into its own
    session, until killed; each turn's id is acked once its call returned
    (concurrent captures share write transactions: memstore.events.groupcommit).
    Every 20 turns a thread also writes ``batches N`` (transactions that held
    more than one capture so far), so the parent can tell they did."""
    import threading

    lock = threading.Lock()
    with Store.open(db, settings=child_settings()) as store:
        _ack(acks, "ready")

        def run(w: int) -> None:
            for j in range(10**6):
                mid = f"{user}-{w}-{j}"
                store.capture(
                    user, f"s{w}", [{"role": "user", "content": f"{user} turn {j}", "id": mid}]
                )
                with lock:
                    _ack(acks, mid)
                    if j % 20 == 19:
                        _ack(acks, f"batches {store.internals.kernel.group.batches}")

        workers = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()


def timed_capture(db: Path, acks: TextIO, user: str, n: int) -> None:
    """Capture ``n`` turns one by one; ack ``id latency_s`` (or ``error``)."""
    with Store.open(db, settings=child_settings()) as store:
        _ack(acks, "ready")
        for j in range(n):
            mid = f"{user}-{j}"
            t0 = time.perf_counter()
            try:
                store.capture(
                    user, "s1", [{"role": "user", "content": f"{user} turn {j}", "id": mid}]
                )
            except Exception as exc:  # counted by the parent, never hidden
                _ack(acks, f"error {type(exc).__name__}")
                continue
            _ack(acks, f"{mid} {time.perf_counter() - t0:.6f}")


def rebuild(db: Path, acks: TextIO) -> None:
    with Store.open(db, settings=child_settings()) as store:
        _ack(acks, "ready")
        while True:
            store.rebuild()
            _ack(acks, "rebuilt")


def erase(db: Path, acks: TextIO, user: str) -> None:
    with Store.open(db, settings=child_settings()) as store:
        _ack(acks, "ready")
        report = store.forget_user(user)
        _ack(acks, f"erased {report.compacted}")


def extract(db: Path, acks: TextIO, user: str, n: int) -> None:
    """Capture first-person turns and run the (rule-based) pipeline between them."""
    with Store.open(db, settings=child_settings(pipeline=True)) as store:
        _ack(acks, "ready")
        for j in range(n):
            text = f"I like dish number {j} and I live in town {j % 7}"
            store.capture(user, f"s{j % 4}", [{"role": "user", "content": text, "id": f"x{j}"}])
            _ack(acks, f"x{j}")
            if j % 3 == 2:
                store.run_pipeline(user)


def main(argv: list[str]) -> None:
    mode, db, ack_path, *rest = argv
    with Path(ack_path).open("a", encoding="utf-8") as acks:
        if mode == "capture":
            capture(Path(db), acks, rest[0], int(rest[1]), int(rest[2]))
        elif mode == "threads_capture":
            threads_capture(Path(db), acks, rest[0], int(rest[1]))
        elif mode == "timed_capture":
            timed_capture(Path(db), acks, rest[0], int(rest[1]))
        elif mode == "rebuild":
            rebuild(Path(db), acks)
        elif mode == "erase":
            erase(Path(db), acks, rest[0])
        elif mode == "extract":
            extract(Path(db), acks, rest[0], int(rest[1]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
