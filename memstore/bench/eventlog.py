"""Event-log benchmark: append and rebuild throughput next to raw SQLite.

Every memstore figure is printed beside a reference measured in the same run
on the same machine, because absolute events/s mean little across machines
while the ratio to a bare ``executemany`` says how much the log layer costs:

- append (1, 100 and 1000 events per transaction) goes through the real path,
  ``store.append`` = ``BEGIN IMMEDIATE`` + ``EventLog.append`` + inline
  projections; the reference inserts the same rows into an identical
  ``events`` table (same DDL and indexes, copied from the store) in a
  separate file with the same driver and pragmas (WAL, synchronous=NORMAL);
- rebuild replays, through every projection, a log of CAPTURED MESSAGES only
  (``messages`` of them: conversation-like text from ``chattext``, ~240 B a
  message over a vocabulary of thousands of words, written by
  ``Store.capture_turn`` one turn per call as hosts do), in its own file; the
  reference reads the same rows and decodes their JSON payloads with the bare
  driver, the floor of any replay. Benchmark-only events, which no projection
  but the counters reads, would flatter the figure, and so would template
  text (short messages over a few dozen words keep every index small and
  every per-word cache warm).
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstore.bench.chattext import ChatText
from memstore.config import Settings
from memstore.db.driver import sqlite_module
from memstore.events.log import NewEvent
from memstore.events.types import Event, registry
from memstore.store import Store
from memstore.timeutil import system_clock, to_iso

TARGET_APPEND_RATIO = 0.5
TARGET_REBUILD_EPS = 20_000.0
# Or this fraction of reading and decoding the same log, in the same run.
TARGET_REBUILD_RATIO = 0.1


@dataclass(frozen=True)
class BenchNoted(Event):
    """A benchmark-only event: small payload, handled only by the stats projection."""

    TYPE = "bench.noted"
    text: str
    n: int


def bench_settings() -> Settings:
    """Every store of this benchmark opens with these: its event type is
    registered here, before any of them reads its log."""
    registry.register(BenchNoted)
    # No embedder work, no scheduler thread: only the log and inline projections run.
    return Settings().replace(embedder="none", background_indexer=False, scheduler=False)


def _new_events(start: int, count: int, streams: int) -> list[NewEvent]:
    return [
        NewEvent(
            f"bench/{i % streams}",
            BenchNoted(text=f"note {i} about the weather and the garden", n=i),
            user_id=f"u{i % streams}",
        )
        for i in range(start, start + count)
    ]


def _raw_rows(start: int, count: int, streams: int) -> list[tuple[Any, ...]]:
    """The rows ``EventLog.append`` would write for ``_new_events`` (same shape/sizes)."""
    now = to_iso(system_clock())
    rows: list[tuple[Any, ...]] = []
    for i in range(start, start + count):
        payload = json.dumps(
            {"text": f"note {i} about the weather and the garden", "n": i},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        rows.append(
            (
                i + 1,
                uuid.uuid4().hex,
                f"bench/{i % streams}",
                i // streams + 1,
                BenchNoted.TYPE,
                1,
                f"u{i % streams}",
                payload,
                now,
                now,
                None,
                None,
                None,
            )
        )
    return rows


class RawTable:
    """A plain copy of the ``events`` table in its own file, written with the bare driver."""

    def __init__(self, path: Path, ddl: list[str]) -> None:
        mod = sqlite_module()
        self.conn: Any = mod.connect(str(path), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        for stmt in ddl:
            self.conn.execute(stmt)

    def insert(self, rows: list[tuple[Any, ...]], per_txn: int) -> float:
        sql = "INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
        t0 = time.perf_counter()
        for i in range(0, len(rows), per_txn):
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany(sql, rows[i : i + per_txn])
            self.conn.execute("COMMIT")
        return time.perf_counter() - t0

    def close(self) -> None:
        self.conn.close()


def _events_ddl(store: Store) -> list[str]:
    with store.internals.db.read() as conn:
        rows = conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'events' AND sql IS NOT NULL "
            "ORDER BY type DESC"  # the table before its indexes
        ).all()
    return [str(r[0]) for r in rows]


def _append_all(store: Store, start: int, count: int, per_txn: int, streams: int) -> float:
    evs = _new_events(start, count, streams)
    t0 = time.perf_counter()
    for i in range(0, count, per_txn):
        store.append(evs[i : i + per_txn])
    return time.perf_counter() - t0


def read_decode_log(path: Path, clock: Callable[[], float] = time.perf_counter) -> float:
    """Read every event row and decode its payload with the bare driver."""
    conn: Any = sqlite_module().connect(str(path))
    t0 = clock()
    for row in conn.execute("SELECT * FROM events ORDER BY position"):
        json.loads(row[7])
    took = clock() - t0
    conn.close()
    return took


def captured_log(store: Store, messages: int, users: int) -> float:
    """``messages`` messages of conversation-like text, one ``capture_turn``
    per user/assistant pair, users round-robin, 50 turns per session: the log
    (and the projections' layout) a host leaves. Returns the seconds it took."""
    chat = ChatText(seed=0)
    t0 = time.perf_counter()
    for i in range(messages // 2):
        user_text, reply = chat.turn()
        store.capture_turn(
            f"u{i % users:03d}", f"s{i // (users * 50)}", user_text, reply, turn_id=f"t{i}"
        )
    return time.perf_counter() - t0


def rebuild_captured(base: Path, messages: int, users: int = 100) -> dict[str, Any]:
    """Rebuild of a log of captured messages next to reading + decoding it."""
    store = Store.open(base / "captured.db", settings=bench_settings())
    try:
        fill_s = captured_log(store, messages, users)
        with store.internals.db.read() as conn:
            text_b = conn.exec_driver_sql("SELECT avg(length(CAST(text AS BLOB))) FROM l0_messages")
            avg_text = float(text_b.scalar_one() or 0)
        load_before = _loadavg()
        t0, c0 = time.perf_counter(), time.process_time()
        replayed = store.rebuild()
        took, cpu = time.perf_counter() - t0, time.process_time() - c0
        raw_took = read_decode_log(store.path)
        raw_cpu = read_decode_log(store.path, time.process_time)
    finally:
        store.close()
    # CPU time too: on a shared machine the wall clock mostly measures the
    # queue for a core, and the process's own CPU seconds much less so.
    return {
        "events": replayed,
        "captured_messages": messages,
        "text_bytes_per_message": avg_text,
        "fill_seconds": fill_s,
        "events_per_s": replayed / took,
        "messages_per_s": messages / took,
        "raw_read_decode_events_per_s": replayed / raw_took,
        "ratio": raw_took / took,
        "seconds": took,
        "cpu_events_per_s": replayed / cpu,
        "cpu_raw_events_per_s": replayed / raw_cpu,
        "cpu_ratio": raw_cpu / cpu,
        "loadavg": f"{load_before} -> {_loadavg()}",
    }


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def durability_cost(base: Path, count: int, streams: int) -> dict[str, Any]:
    """One event per transaction (the mode capture uses) with each durability
    setting, on fresh files: what synchronous=FULL costs per commit."""
    out: dict[str, Any] = {"events": count}
    for mode in ("normal", "full"):
        store = Store.open(
            base / f"durability-{mode}.db", settings=bench_settings().replace(durability=mode)
        )
        try:
            evs = _new_events(0, count, streams)
            lat = []
            t0 = time.perf_counter()
            for ev in evs:
                t = time.perf_counter()
                store.append([ev])
                lat.append(time.perf_counter() - t)
            took = time.perf_counter() - t0
        finally:
            store.close()
        lat.sort()
        out[mode] = {
            "events_per_s": count / took,
            "p50_ms": 1000 * lat[len(lat) // 2],
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        }
    out["full_over_normal"] = out["normal"]["events_per_s"] / out["full"]["events_per_s"]
    return out


def profile_append(store: Store, start: int, per_txn: int, streams: int, top: int = 18) -> str:
    """cProfile of batched appends through the real path; the top functions by own time."""
    evs = _new_events(start, per_txn * 5, streams)
    prof = cProfile.Profile()
    prof.enable()
    for i in range(0, len(evs), per_txn):
        store.append(evs[i : i + per_txn])
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def run_eventlog(
    n: int = 20_000,
    *,
    workdir: Path | None = None,
    streams: int = 10,
    messages: int | None = None,
    profile: bool = False,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Measure append and rebuild throughput; returns a JSON-ready dict.

    The rebuild replays ``messages`` captured messages (default ``5 * n``, so
    100k at the default ``n``)."""
    messages = 5 * n if messages is None else messages
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        base = Path(tmp)
        store = Store.open(base / "bench.db", settings=bench_settings())
        raw = RawTable(base / "raw.db", _events_ddl(store))
        results: dict[str, Any] = {"n": n, "streams": streams, "append": []}
        try:
            start = 0
            for per_txn in (1, 100, 1000):
                count = n if per_txn > 1 else min(n, 5000)
                log(f"append {count} events, {per_txn} per transaction")
                took = _append_all(store, start, count, per_txn, streams)
                raw_took = raw.insert(_raw_rows(start, count, streams), per_txn)
                start += count
                eps, raw_eps = count / took, count / raw_took
                results["append"].append(
                    {
                        "per_txn": per_txn,
                        "events": count,
                        "events_per_s": eps,
                        "raw_events_per_s": raw_eps,
                        "ratio": eps / raw_eps,
                    }
                )
            log(f"rebuild a log of {messages} captured messages (2 per event)")
            results["rebuild"] = rebuild_captured(base, messages)
            dur_n = min(n, 2000)
            log(f"durability: {dur_n} single-event transactions, normal vs full")
            results["durability"] = durability_cost(base, dur_n, streams)
            batched = [a["ratio"] for a in results["append"] if a["per_txn"] > 1]
            results["targets"] = {
                "batched_append_ratio_min": TARGET_APPEND_RATIO,
                "batched_append_ratio_met": min(batched) >= TARGET_APPEND_RATIO,
                "rebuild_events_per_s_min": TARGET_REBUILD_EPS,
                "rebuild_ratio_min": TARGET_REBUILD_RATIO,
                "rebuild_met": results["rebuild"]["cpu_events_per_s"] >= TARGET_REBUILD_EPS
                or results["rebuild"]["cpu_ratio"] >= TARGET_REBUILD_RATIO,
            }
            if profile or not results["targets"]["batched_append_ratio_met"]:
                results["profile_append_1000"] = profile_append(store, start, 1000, streams)
        finally:
            raw.close()
            store.close()
    return results


def format_eventlog(res: dict[str, Any]) -> str:
    lines = [
        f"event log, {res['n']} events per run, {res['streams']} streams",
        f"{'append':<24}{'memstore ev/s':>15}{'raw ev/s':>13}{'ratio':>8}",
    ]
    for a in res["append"]:
        label = f"{a['per_txn']} per transaction"
        lines.append(
            f"{label:<24}{a['events_per_s']:>15,.0f}{a['raw_events_per_s']:>13,.0f}"
            f"{a['ratio']:>8.2f}"
        )
    rb = res["rebuild"]
    lines.append(
        f"{'rebuild (all proj.)':<24}{rb['events_per_s']:>15,.0f}"
        f"{rb['raw_read_decode_events_per_s']:>13,.0f}{rb['ratio']:>8.2f}"
    )
    lines.append(
        f"{'  same, CPU seconds':<24}{rb['cpu_events_per_s']:>15,.0f}"
        f"{rb['cpu_raw_events_per_s']:>13,.0f}{rb['cpu_ratio']:>8.2f}"
    )
    lines.append(
        f"  rebuild: {rb['events']} capture events ({rb['captured_messages']} messages of "
        f"{rb['text_bytes_per_message']:.0f} B, captured one turn per call in "
        f"{rb['fill_seconds']:.0f} s; {rb['messages_per_s']:,.0f} messages/s) in "
        f"{rb['seconds']:.2f} s; raw = read + json-decode of the same log; "
        f"load average {rb['loadavg']}"
    )
    d = res.get("durability")
    if d:
        lines.append(
            f"durability, 1 event per transaction ({d['events']} events): "
            + "; ".join(
                f"{m} {d[m]['events_per_s']:,.0f} ev/s, p50 {d[m]['p50_ms']:.2f} ms, "
                f"p99 {d[m]['p99_ms']:.2f} ms"
                for m in ("normal", "full")
            )
            + f" -> full costs {d['full_over_normal']:.2f}x"
        )
    t = res["targets"]
    lines.append(
        f"targets: batched append >= {t['batched_append_ratio_min']:.0%} of raw: "
        f"{'met' if t['batched_append_ratio_met'] else 'MISSED'}; rebuild >= "
        f"{t['rebuild_events_per_s_min']:,.0f} ev/s of CPU or >= {t['rebuild_ratio_min']:.0%} "
        f"of raw: {'met' if t['rebuild_met'] else 'MISSED'}"
    )
    return "\n".join(lines)
