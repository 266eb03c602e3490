"""Capturing processes beside ``memstore bench load``'s library phases.

A host with several processes on one file (agents of a multi-agent host, a
CLI import beside a running agent) makes the threads of one process wait
for the others' write transactions as well as for each other's. With
``--processes P`` each library phase runs beside P child processes, each with
its own ``Store`` on the same file, capturing one turn per call as fast as
they can from before the phase starts until it ends.

A child (``python -m memstore.bench.load_procs TARGET EMBEDDER PIPELINE SEED``)
opens the store, loads its embedder, captures one warm-up turn and prints
``ready``; it starts on ``go`` and stops on ``stop`` (stdin), then prints its
latencies' summary as one JSON line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

from memstore.bench.chattext import ChatText
from memstore.bench.metrics import percentile
from memstore.config import Settings
from memstore.store import Store

__all__ = ["Capturers"]


class Capturers:
    """``count`` capturing child processes on the store ``target``."""

    def __init__(self, count: int, target: str, embedder: str, pipeline: bool) -> None:
        flag = "1" if pipeline else "0"
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", "memstore.bench.load_procs", target, embedder, flag, str(k)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for k in range(count)
        ]
        for p in self.procs:
            assert p.stdout is not None
            line = p.stdout.readline().strip()
            if line != "ready":
                self.stop()
                raise RuntimeError(f"a capturing process did not start: {line!r}")

    def _say(self, word: str) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write(word + "\n")
            p.stdin.flush()

    def go(self) -> None:
        self._say("go")

    def finish(self) -> dict[str, Any]:
        """Stop them; their captures together: count, per second, p50/p99."""
        self._say("stop")
        got = []
        for p in self.procs:
            assert p.stdout is not None
            got.append(json.loads(p.stdout.readline()))
            p.wait(120)
        lat = [x for g in got for x in g["latencies"]]
        seconds = max((g["seconds"] for g in got), default=0.0)
        p50, p99 = percentile(lat, 50) * 1000, percentile(lat, 99) * 1000
        return {
            "processes": len(got),
            "captures": len(lat),
            "per_s": round(len(lat) / seconds, 1) if seconds else 0.0,
            "p50_ms": round(p50, 2),
            "p99_ms": round(p99, 2),
            "errors": sum(g["errors"] for g in got),
            "first_error": next((g["first_error"] for g in got if g.get("first_error")), None),
        }

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)


def _child(target: str, embedder: str, pipeline: bool, seed: int) -> None:
    settings = Settings().replace(embedder=embedder, scheduler=pipeline, background_indexer=True)
    chat = ChatText(100 + seed)
    turns = [chat.turn() for _ in range(2000)]
    user = f"p{seed}"
    with Store.open(target, settings=settings) as store:
        store.load_embedder()
        store.capture_turn(user, "s1", *turns[0], turn_id="warm")
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            return
        stop = threading.Event()

        def wait_for_stop() -> None:
            sys.stdin.readline()
            stop.set()

        threading.Thread(target=wait_for_stop, daemon=True).start()
        latencies: list[float] = []
        errors = 0
        first_error: str | None = None
        i = 0
        t0 = time.perf_counter()
        while not stop.is_set():
            a, b = turns[i % len(turns)]
            started = time.perf_counter()
            try:
                store.capture_turn(user, "s1", a, b, turn_id=f"t{i}")
                latencies.append(time.perf_counter() - started)
            except Exception as e:  # counted and shown, as the threads' are
                errors += 1
                first_error = first_error or f"{type(e).__name__}: {e}"
            i += 1
        took = time.perf_counter() - t0
    out = {"latencies": latencies, "seconds": took, "errors": errors, "first_error": first_error}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]))
