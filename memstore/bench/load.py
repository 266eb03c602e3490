"""``memstore bench load``: capture under concurrent callers, next to one caller alone.

Each client captures one conversation turn per call (``capture_turn``, or
``POST /v1/capture`` with the turn's two messages) into its own user's
session, as a chat product's users do, with conversation-like text
(memstore.bench.chattext: ~245-byte messages, ~8k distinct words). Two
setups, each run with one client and then with many, on a fresh store each:

- ``library``: threads of this process calling ``Store.capture_turn``;
- ``gateway``: a real ``memstore serve`` (uvicorn) in a child process on a
  loopback port, with HTTP clients on threads of this process (keep-alive
  ``http.client`` connections, the lightest client the standard library has;
  their CPU counts on this machine too).

With ``db_url`` (PostgreSQL) every phase gets a new database on that server
instead of a file (its user needs CREATEDB). With ``processes`` the library
phases run beside that many capturing processes on the same store
(memstore.bench.load_procs).

A phase ends after ``seconds`` or ``max_captures`` captures, whichever comes
first. Reported per phase: captures per second (over the phase's wall time),
p50/p99 latency of one call, errors; with the ratio to the one-client phase
of the same setup in the same run; and the CPU time per capture of the
process that stores (library: this one, its indexer included; gateway: the
server), which a loaded machine disturbs less than throughput. Targets: 50 gateway clients >= 2x one
client's throughput with p99 <= 4x p50; 8 threads >= 1.5x with p99 <= 4x p50.

After each phase: how many of its messages had a vector when it ended
(the background indexer embeds them meanwhile).

The store runs as ``memstore serve`` would by default except: the hashing
embedder (the background indexer still runs, so vectors are written while
the captures are), and no pipeline timers (no derivation). With ``pipeline``
the timers run, so memories are derived while the captures arrive; with
``embedder="e5"`` as well, the store is the one a plain ``Store.open`` (or
``memstore serve``) gives.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, create_engine, text

from memstore.bench.chattext import ChatText
from memstore.bench.load_procs import Capturers
from memstore.bench.metrics import percentile
from memstore.config import Settings
from memstore.store import Store

TARGETS = {"library": (1.5, 4.0), "gateway": (2.0, 4.0)}

Call = Callable[[int, int], None]  # (client, its n-th call)


def _settings(embedder: str, pipeline: bool = False) -> Settings:
    return Settings().replace(embedder=embedder, scheduler=pipeline, background_indexer=True)


def _turns(n: int, seed: int) -> list[tuple[str, str]]:
    gen = ChatText(seed)
    return [gen.turn() for _ in range(n)]


def process_cpu_s(pid: int | None = None) -> float | None:
    """CPU seconds (user + system) of this process, or of ``pid`` (Linux's
    /proc; None elsewhere): per capture, a figure a loaded machine disturbs
    far less than wall-clock throughput."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(
    clients: int, seconds: float, max_captures: int, call: Call, *, cpu_of: int | None = None
) -> dict[str, Any]:
    """Run ``clients`` threads calling ``call`` until the time or the count is
    up; ``cpu_of``: the process whose CPU time to count (default this one)."""
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[str] = []
    issued = 0
    start = threading.Barrier(clients + 1)
    deadline = 0.0

    def client(c: int) -> None:
        nonlocal issued
        mine: list[float] = []
        start.wait()
        i = 0
        while time.perf_counter() < deadline:
            with lock:
                if issued >= max_captures:
                    break
                issued += 1
            t0 = time.perf_counter()
            try:
                call(c, i)
            except Exception as e:  # counted and shown, never hidden
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
                continue
            finally:
                i += 1
            mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    deadline = time.perf_counter() + seconds
    cpu0 = process_cpu_s(cpu_of)
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu1 = process_cpu_s(cpu_of)
    cpu_ms = (
        round((cpu1 - cpu0) * 1000 / len(latencies), 3)
        if cpu0 is not None and cpu1 is not None and latencies
        else None
    )
    p50, p99 = percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000
    return {
        "clients": clients,
        "captures": len(latencies),
        "seconds": round(wall, 2),
        "per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(p50, 2),
        "p99_ms": round(p99, 2),
        "p99_over_p50": round(p99 / p50, 2) if p50 else None,
        "cpu_ms_per_capture": cpu_ms,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def _target(work: Path, name: str, db_url: str | None) -> AbstractContextManager[Any]:
    """A fresh store: a file in ``work``, or a new database on ``db_url``'s server."""
    if db_url is None:
        return nullcontext(str(work / f"{name}.db"))
    from memstore.bench.scale_db import fresh_pg

    return fresh_pg(db_url)


@dataclass(frozen=True)
class Phase:
    """One phase: ``clients`` capturing into the store ``target``."""

    target: str
    clients: int
    seconds: float
    max_captures: int
    embedder: str
    pipeline: bool
    processes: int = 0  # capturing processes beside it (library phases)
    seed: int = 1

    def turns(self) -> list[tuple[str, str]]:
        return _turns(min(self.max_captures, 4000), self.seed)


def _library_phase(p: Phase) -> dict[str, Any]:
    turns = p.turns()
    with Store.open(p.target, settings=_settings(p.embedder, p.pipeline)) as store:

        def call(c: int, i: int) -> None:
            user, reply = turns[(c * 7919 + i) % len(turns)]
            store.capture_turn(f"u{c}", "s1", user, reply, turn_id=f"t{i}")

        # Loaded before the phase, as `memstore serve` does before it listens
        # (Store.load_embedder): e5's first load stalls every thread.
        store.load_embedder()
        call(-1, 0)  # warm-up, not timed (first statements, caches)
        beside = Capturers(p.processes, p.target, p.embedder, p.pipeline) if p.processes else None
        try:
            if beside is not None:
                beside.go()
            res = drive(p.clients, p.seconds, p.max_captures, call)
            if beside is not None:
                res["beside"] = beside.finish()
        finally:
            if beside is not None:
                beside.stop()
        res["messages"], res["embedded"] = _embedded(store)
        if p.pipeline:
            with store.internals.db.read() as conn:
                res["memories"] = _memories_on(conn)
        group = getattr(store.internals.kernel, "group", None)  # (absent from older trees compared)
        if group is not None:
            res["shared_transactions"] = group.batches
            res["captures_in_shared"] = group.batched
    return res


def _embedded(store: Store) -> tuple[int, int]:
    """(messages stored, messages with a vector) when the phase ends: how far
    the background indexer kept up while the captures ran."""
    with store.internals.db.read() as conn:
        return _embedded_on(conn)


def _embedded_on(conn: Connection) -> tuple[int, int]:
    stored = conn.execute(text("SELECT count(*) FROM l0_messages")).scalar_one()
    cursor = conn.execute(
        text("SELECT max(cursor) FROM vector_spaces WHERE kind = 'l0'")
    ).scalar_one()
    embedded = 0
    if cursor is not None:
        q = "SELECT count(*) FROM l0_messages WHERE id <= :c"
        embedded = conn.execute(text(q), {"c": cursor}).scalar_one()
    return int(stored), int(embedded)


def _memories_on(conn: Connection) -> int:
    """Memories derived when the phase ends (with the pipeline's timers on)."""
    return int(conn.execute(text("SELECT count(*) FROM l1_memories")).scalar_one())


def _embedded_at(target: str, pipeline: bool = False) -> tuple[int, int, int | None]:
    """``_embedded`` (and with ``pipeline`` the memories derived) of the store
    a server holds open (a file path or a URL), read over a connection of
    this process while the server still runs."""
    engine = create_engine(target if "://" in target else f"sqlite:///{target}")
    try:
        with engine.connect() as conn:
            stored, embedded = _embedded_on(conn)
            return stored, embedded, _memories_on(conn) if pipeline else None
    finally:
        engine.dispose()


class Gateway:
    """``memstore serve`` in a child process on a free loopback port."""

    def __init__(self, db: str, embedder: str, pipeline: bool = False) -> None:
        env = dict(os.environ)
        env.update(
            MEMSTORE_EMBEDDER=embedder,
            MEMSTORE_SCHEDULER="true" if pipeline else "false",
            MEMSTORE_BACKGROUND_INDEXER="true",
        )
        env.pop("MEMSTORE_GATEWAY_API_KEY", None)
        env.pop("TDAI_GATEWAY_API_KEY", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memstore", "serve", "--db", db, "--port", "0"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()  # "memstore gateway on http://127.0.0.1:PORT ..."
        if "gateway on http://" not in line:
            rest = self.proc.stderr.read() if self.proc.poll() is not None else ""
            self.stop()
            raise RuntimeError(f"memstore serve did not start: {line}{rest}")
        self.port = int(line.split("gateway on http://", 1)[1].split()[0].rsplit(":", 1)[1])

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def _gateway_phase(p: Phase) -> dict[str, Any]:
    turns = p.turns()
    gateway = Gateway(p.target, p.embedder, p.pipeline)
    conns: dict[int, http.client.HTTPConnection] = {}
    try:

        def call(c: int, i: int) -> None:
            conn = conns.get(c) or conns.setdefault(c, gateway.connection())
            user, reply = turns[(c * 7919 + i) % len(turns)]
            body = json.dumps(
                {
                    "user_id": f"u{c}",
                    "session_id": "s1",
                    "messages": [
                        {"role": "user", "content": user, "id": f"t{i}:0"},
                        {"role": "assistant", "content": reply, "id": f"t{i}:1"},
                    ],
                }
            )
            try:
                conn.request("POST", "/v1/capture", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                conns.pop(c, None)
                conn.close()
                raise
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")

        call(-1, 0)  # warm-up, not timed (the app's first request loads more code)
        res = drive(p.clients, p.seconds, p.max_captures, call, cpu_of=gateway.proc.pid)
        res["messages"], res["embedded"], memories = _embedded_at(p.target, p.pipeline)
        if memories is not None:
            res["memories"] = memories
        return res
    finally:
        for conn in conns.values():
            conn.close()
        gateway.stop()


def run_load(
    *,
    threads: int = 8,
    clients: int = 50,
    seconds: float = 10.0,
    max_captures: int = 4000,
    setups: tuple[str, ...] = ("library", "gateway"),
    embedder: str = "hashing",
    pipeline: bool = False,
    processes: int = 0,
    db_url: str | None = None,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    many = {"library": threads, "gateway": clients}
    res: dict[str, Any] = {
        "embedder": embedder,
        "pipeline": pipeline,
        "processes": processes,
        "seconds": seconds,
        "max_captures": max_captures,
        "backend": "postgresql" if db_url else "sqlite",
        "load_before": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(dir=workdir, prefix="memstore-load-") as tmp:
        for setup in setups:
            rows = []
            for n in (1, many[setup]):
                log(f"load: {setup}, {n} client(s) ...")
                with _target(Path(tmp), f"{setup}-{n}", db_url) as target:
                    phase = Phase(target, n, seconds, max_captures, embedder, pipeline, processes)
                    run = _library_phase if setup == "library" else _gateway_phase
                    rows.append(run(phase))
            one, lots = rows
            lots["throughput_vs_one"] = round(lots["per_s"] / one["per_s"], 2)
            res[setup] = {"one": one, "many": lots}
    res["load_after"] = os.getloadavg()
    return res


def format_load(res: dict[str, Any]) -> str:
    lines = [
        "memstore bench load: one conversation turn per call (~245 B messages), "
        f"{res['backend']}, {res['embedder']} embedder, pipeline timers "
        f"{'on' if res.get('pipeline') else 'off'}, phases of <= {res['seconds']} s / "
        f"{res['max_captures']} captures"
        + (
            f"; library phases beside {res['processes']} capturing processes"
            if res.get("processes")
            else ""
        ),
        f"load average before {res['load_before'][0]:.2f}, after {res['load_after'][0]:.2f}",
        f"{'setup':<9} {'clients':>7} {'captures':>8} {'per s':>8} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'p99/p50':>7} {'vs 1':>6} {'errors':>6} {'CPU ms/capture':>14}",
    ]
    for setup in ("library", "gateway"):
        if setup not in res:
            continue
        for key in ("one", "many"):
            r = res[setup][key]
            ratio = f"{r['throughput_vs_one']:.2f}x" if key == "many" else "1x"
            lines.append(
                f"{setup:<9} {r['clients']:>7} {r['captures']:>8} {r['per_s']:>8.1f} "
                f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['p99_over_p50'] or 0:>7.2f} "
                f"{ratio:>6} {r['errors']:>6} {r['cpu_ms_per_capture'] or 0:>14.3f}"
            )
        many = res[setup]["many"]
        want_x, want_tail = TARGETS[setup]
        met = many["throughput_vs_one"] >= want_x and (many["p99_over_p50"] or 99) <= want_tail
        lines.append(
            f"  target: >= {want_x}x one client, p99 <= {want_tail}x p50: "
            f"{'met' if met else 'NOT met'}"
        )
        if "shared_transactions" in many:
            lines.append(
                f"  {many['captures_in_shared']} of {many['captures']} captures committed in "
                f"{many['shared_transactions']} shared transactions"
            )
        for key in ("one", "many"):
            r = res[setup][key]
            if "embedded" in r:
                lines.append(
                    f"  {r['clients']} client(s): {r['embedded']} of {r['messages']} messages "
                    "had their vectors when the phase ended"
                    + (f", {r['memories']} memories derived" if "memories" in r else "")
                )
        for key in ("one", "many"):
            b = res[setup][key].get("beside")
            if b:
                lines.append(
                    f"  beside {res[setup][key]['clients']} thread(s): {b['processes']} "
                    f"processes captured {b['captures']} ({b['per_s']:.1f}/s), p50 "
                    f"{b['p50_ms']:.2f} ms, p99 {b['p99_ms']:.2f} ms, {b['errors']} errors"
                    + (f" (first: {b['first_error']})" if b.get("first_error") else "")
                )
        if many["first_error"]:
            lines.append(f"  first error: {many['first_error']}")
    return "\n".join(lines)


__all__ = ["drive", "format_load", "run_load"]
