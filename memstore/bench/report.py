"""BENCHMARKS.md from the JSON results the bench commands wrote.

Each bench command writes ``<results>/<name>.json`` (``eventlog``,
``capture_search``, ``locomo``, ``scale``) with the command line that made it;
this module renders whatever is there into one Markdown file with tables and
PNG plots (matplotlib, Agg backend: no display needed). Missing results are
listed as not run rather than silently left out.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstore.bench.capture_search import format_capture_search
from memstore.bench.eventlog import format_eventlog
from memstore.bench.locomo import format_locomo
from memstore.bench.locomo_index import CATEGORIES, CATEGORY_NAMES, KS
from memstore.bench.scale import format_scale

if TYPE_CHECKING:  # matplotlib is optional and imported only when plotting
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

RESULT_NAMES = (
    "eventlog",
    "capture_search",
    "locomo",
    "locomo_chatlike",
    "locomo_recall",
    "locomo_recall_chatlike",
    "recall_scale",
    "scale",
    "hermes",
)


def machine_info() -> dict[str, Any]:
    """CPU model, cores, Python and SQLite of the machine that runs the report."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from memstore.db.driver import module_name, sqlite_module

    mod = sqlite_module()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "sqlite_module": module_name(mod),
        "sqlite": mod.sqlite_version,
    }


def with_meta(result: dict[str, Any], command: str) -> dict[str, Any]:
    """Stamp a result with the command, date and machine before it is written."""
    return {
        **result,
        "meta": {
            "command": command,
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine_info(),
        },
    }


def write_result(result: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")


def _write(fig: Figure, out: Path) -> None:
    """Save a finished figure the same way for every plot, and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _log_log(ax: Axes, xlabel: str) -> None:
    """The log-log axes of the growth-with-size plots."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)


def _plot_recall(res: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, s in res["systems"].items():
        ys = [s["overall"][f"recall@{k}"] for k in KS]
        ax.plot(
            KS, ys, marker="o", label=name, linestyle="--" if name in ("bm25", "dense") else "-"
        )
    for name, p in res.get("peers", {}).items():
        if p.get("ok"):
            ys = [p["scores"]["overall"][f"recall@{k}"] for k in KS]
            ax.plot(KS, ys, marker="s", linestyle="-.", label=f"peer: {name}")
    ax.set_xlabel("k")
    ax.set_ylabel("turn-level recall@k")
    ax.set_xticks(list(KS))
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(
        f"LoCoMo ({res['conversations']} conversations, {res['questions_scored']} questions)"
    )
    _write(fig, out)


def _plot_latency(res: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for layout in sorted({r["layout"] for r in res["runs"]}):
        runs = sorted((r for r in res["runs"] if r["layout"] == layout), key=lambda r: r["size"])
        sizes = [r["size"] for r in runs]
        for key, style in (("hybrid", "-"), ("keyword", ":"), ("ref_numpy_cosine", "--")):
            ax.plot(
                sizes,
                [r["search"][key]["p95_ms"] for r in runs],
                marker="o",
                linestyle=style,
                label=f"{key} p95, {layout}",
            )
    _log_log(ax, "messages in the store")
    ax.set_ylabel("ms")
    ax.set_title(f"search latency vs size ({res['embedder']})")
    _write(fig, out)


def _dig(run: dict[str, Any], path: tuple[str, ...]) -> float:
    value: Any = run
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if value is not None else float("nan")


def _plot_scale(res: dict[str, Any], out: Path) -> None:
    """How each figure grows with N, log-log: latencies left, sizes and rates right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = sorted(res["runs"], key=lambda r: r["size"])
    xs = [r["size"] for r in runs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    # Series as key paths into each run: (label, path, reference?)
    latency = (
        ("capture_turn p95, indexer working", ("capture", "p95_ms"), False),
        ("keyword L0 p95", ("search", "keyword_l0", "p95_ms"), False),
        ("hybrid L0 p95", ("search", "hybrid_l0", "p95_ms"), False),
        ("hybrid L1 p95", ("search", "hybrid_l1", "p95_ms"), False),
        ("recall p95", ("search", "recall", "p95_ms"), False),
        ("ref numpy cosine p95", ("search", "ref_numpy_cosine", "p95_ms"), True),
        ("ref FTS5 alone p95", ("search", "ref_fts5_alone", "p95_ms"), True),
    )
    growth = (
        ("database MB", ("db_mb",), False),
        ("peak RSS MB", ("rss_mb", "peak"), False),
        ("L0 fill msgs/s", ("fill_l0_per_s",), False),
        ("L1 fill memories/s", ("fill_l1_per_s",), False),
        ("reindex rows/s", ("reindex", "rows_per_s"), False),
        ("rebuild events/s", ("rebuild", "events_per_s"), False),
        ("ref raw insert rows/s", ("ref_raw_insert_per_s",), True),
    )
    for ax, series in ((left, latency), (right, growth)):
        for label, path, ref in series:
            ys = [_dig(r, path) for r in runs]
            # Older results lack a series; a percentile with too few samples is NaN.
            if not any(y > 0 for y in ys):
                continue
            ax.plot(
                xs,
                ys,
                marker="o",
                linestyle="--" if ref else "-",
                label=label,
            )
    left.set_ylabel("ms")
    left.set_title("latency vs size")
    right.set_title("size and throughput vs size")
    for ax in (left, right):
        _log_log(ax, "N (L0 messages = L1 memories)")
    fig.suptitle(f"scale ({res['embedder']} embedder)")
    _write(fig, out)


def _peers_table(res: dict[str, Any]) -> list[str]:
    head = ["system", *(f"R@{k}" for k in KS), "H@10", "add p50 ms", "add p95 ms"]
    head += ["search p50 ms", "search p95 ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    hy, cap = res["systems"].get("hybrid"), res.get("capture_ms", {})
    lat = res["latency_ms"].get("hybrid", {})
    if hy is not None:
        cells = ["memstore hybrid", *(f"{hy['overall'][f'recall@{k}']:.3f}" for k in KS)]
        cells += [f"{hy['overall']['hit@10']:.3f}"]
        cells += [
            f"{cap.get('p50_ms', float('nan')):.2f}",
            f"{cap.get('p95_ms', float('nan')):.2f}",
        ]
        cells += [f"{lat.get('p50', float('nan')):.1f}", f"{lat.get('p95', float('nan')):.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    for name, p in res["peers"].items():
        if not p["ok"]:
            lines.append(f"| {name} | not run: {p['error']} |" + " |" * (len(head) - 2))
            continue
        o = p["scores"]["overall"]
        cells = [f"{name} ({p['version']})", *(f"{o[f'recall@{k}']:.3f}" for k in KS)]
        cells += [f"{o['hit@10']:.3f}"]
        cells += [f"{p['add']['p50_ms']:.2f}", f"{p['add']['p95_ms']:.2f}"]
        cells += [f"{p['search']['p50_ms']:.1f}", f"{p['search']['p95_ms']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _locomo_table(res: dict[str, Any]) -> list[str]:
    head = ["system", *(f"R@{k}" for k in KS), "H@10", "NDCG@10"]
    head += [f"R@10 c{c} {CATEGORY_NAMES[c]}" for c in CATEGORIES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, s in res["systems"].items():
        o = s["overall"]
        cells = [name, *(f"{o[f'recall@{k}']:.3f}" for k in KS), f"{o['hit@10']:.3f}"]
        cells.append(f"{o['ndcg@10']:.3f}")
        cells += [f"{s['per_category'][str(c)]['recall@10']:.3f}" for c in CATEGORIES]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _section(title: str, res: dict[str, Any], text: str) -> list[str]:
    meta = res.get("meta", {})
    return [
        f"## {title}",
        "",
        f"Command: `{meta.get('command', '?')}` — {meta.get('date', '?')}",
        "",
        "```",
        text,
        "```",
        "",
    ]


def render_report(results: Path, out: Path, images: Path) -> str:
    """Write ``out`` (and PNGs under ``images``); returns the Markdown."""
    found = {
        n: json.loads((results / f"{n}.json").read_text())
        for n in RESULT_NAMES
        if (results / f"{n}.json").is_file()
    }
    images.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(images, out.parent)
    machine = next((r["meta"]["machine"] for r in found.values() if "meta" in r), machine_info())
    md = [
        "# memstore benchmarks",
        "",
        "Generated by `memstore bench report` from the JSON in "
        f"`{results}`. Every figure sits next to a reference measured in the same run.",
        "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['platform']}; "
        f"Python {machine['python']}; SQLite {machine['sqlite']} ({machine['sqlite_module']}).",
        "",
    ]
    if "locomo" in found:
        res = found["locomo"]
        _plot_recall(res, images / "locomo_recall.png")
        md += _section("Retrieval quality: LoCoMo", res, format_locomo(res))
        md += [*_locomo_table(res), "", f"![recall@k per strategy]({rel}/locomo_recall.png)", ""]
        if res.get("peers"):
            md += ["### Peers on the same data", "", *_peers_table(res), ""]
    if "locomo_chatlike" in found:
        res = found["locomo_chatlike"]
        md += _section(
            "Retrieval quality: LoCoMo, chat-like (filler replies inserted)",
            res,
            format_locomo(res),
        )
        md += [*_locomo_table(res), ""]
    for name, title in (
        ("locomo_recall", "Recall: what reaches the agent (LoCoMo)"),
        ("locomo_recall_chatlike", "Recall on the chat-like LoCoMo variant"),
    ):
        if name in found:
            from memstore.bench.locomo_recall import format_recall_bench

            md += _section(title, found[name], format_recall_bench(found[name]))
    if "recall_scale" in found:
        from memstore.bench.recall_scale import format_recall_scale

        res = found["recall_scale"]
        md += _section("Recall latency at scale", res, format_recall_scale(res))
    if "scale" in found:
        res = found["scale"]
        _plot_scale(res, images / "scale.png")
        md += _section("Scale: messages and memories in one file", res, format_scale(res))
        md += [f"![growth with size, log-log]({rel}/scale.png)", ""]
    if "capture_search" in found:
        res = found["capture_search"]
        _plot_latency(res, images / "search_latency.png")
        md += _section("Capture and search", res, format_capture_search(res))
        md += [f"![search latency vs size]({rel}/search_latency.png)", ""]
    if "eventlog" in found:
        md += _section("Event log", found["eventlog"], format_eventlog(found["eventlog"]))
    if "hermes" in found:
        from memstore.bench.hermes import format_hermes_bench

        md += _section(
            "Hermes provider (through hermes-agent's MemoryManager)",
            found["hermes"],
            format_hermes_bench(found["hermes"]),
        )
    missing = [n for n in RESULT_NAMES if n not in found]
    if missing:
        md += [f"Not run for this report: {', '.join(missing)}.", ""]
    text = "\n".join(md)
    out.write_text(text, encoding="utf-8")
    return text
