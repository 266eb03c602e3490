"""``bench scale --db``'s tables: one per layout, the backends side by side."""

from __future__ import annotations

import math
from typing import Any

from memstore.bench.scale_db import BACKENDS

_ROWS: tuple[tuple[str, str, str], ...] = (
    ("build.fill_per_s", "", "build: bulk fill, messages/s"),
    ("build.reindex_per_s", "", "build: reindex, rows/s (memoised)"),
    ("build.bytes_per_message", "", "bytes per message"),
    ("capture", "p50_ms", "capture_turn p50 ms, indexer working"),
    ("capture", "p99_ms", "capture_turn p99 ms, indexer working"),
    ("capture_idle", "p50_ms", "  ref: capture_turn p50 ms, indexer stopped"),
    ("capture_idle", "p99_ms", "  ref: capture_turn p99 ms, indexer stopped"),
    ("hybrid", "p50_ms", "hybrid L0 p50 ms (+ query embedding)"),
    ("hybrid", "p95_ms", "hybrid L0 p95 ms (+ query embedding)"),
    ("ref_query_embedding", "p95_ms", "  ref: query embedding alone p95 ms"),
    ("ref_numpy_cosine", "p95_ms", "  ref: numpy cosine, same vectors, p95 ms"),
    ("keyword", "p50_ms", "keyword L0 p50 ms"),
    ("keyword", "p95_ms", "keyword L0 p95 ms"),
    ("ref_fts5_alone", "p95_ms", "  ref: FTS5 + bm25, same user, p95 ms"),
    ("rebuild_events_per_s", "", "rebuild, events/s"),
    ("ref_read_decode_per_s", "", "  ref: read + decode the log, events/s"),
    ("derive.messages_per_s", "", "derivation, messages/s (1 process)"),
)


def format_backends(res: dict[str, Any]) -> str:
    runs: dict[str, Any] = res["runs"]
    backends = list(dict.fromkeys(k.split(" ", 1)[0] for k in runs))
    both = backends == list(BACKENDS)
    lines = [
        f"layouts {', '.join(res['layouts'])} (users x messages, each its own store); embedder "
        f"{res['embedder']}; {res['n_queries']} queries, {res['turns']} capture turns per phase; "
        f"defaults (indexer on, context vectors on); built by bulk_capture "
        f"({res['per_transaction']} captures per transaction) + reindex"
        + (f"; PostgreSQL at {res['server']}" if res.get("server") else ""),
    ]
    for key, run in runs.items():
        b = run["build"]
        lines.append(
            f"load average {key}: build {b['load_before']} -> {b['load_after']}"
            f"{' (kept build reused)' if b.get('reused') else ''}; "
            f"measure {run['load_before']} -> {run['load_after']}"
        )
    for label in res["layouts"]:
        cols = [runs.get(f"{b} {label}") for b in backends]
        head = " | ".join(f"{b:>10}" for b in ("SQLite" if b == "sqlite" else "PostgreSQL"
                                                  for b in backends))  # fmt: skip
        lines += [
            "",
            f"{label}:",
            "",
            f"| {'figure':<44} | {head} |" + (" PG / SQLite |" if both else ""),
        ]
        lines.append(
            f"|{'-' * 46}|" + "-----------:|" * len(backends) + ("------------:|" if both else "")
        )
        for key, sub, name in _ROWS:
            vals = [_get(c, key, sub) if c else None for c in cols]
            if all(v is None for v in vals):
                continue
            row = f"| {name:<44} | " + " | ".join(f"{_num(v):>10}" for v in vals) + " |"
            if both:
                a, c = vals
                ratio = "-"
                if a is not None and c is not None and a and not (math.isnan(a) or math.isnan(c)):
                    ratio = f"{c / a:.2f}x"
                row += f" {ratio:>11} |"
            lines.append(row)
    return "\n".join(lines)


def _get(r: dict[str, Any], key: str, sub: str) -> float | None:
    v: Any = r
    for part in key.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    if isinstance(v, dict):
        v = v.get(sub)
    return None if v is None else float(v)


def _num(v: float | None) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}"
