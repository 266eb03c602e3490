"""bench recall-scale: the recall latency benchmark's plumbing, at a tiny size.

No timing assertions (the numbers belong in BENCHMARKS.md): this checks that
every step is timed for every query and that the command writes its JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from click.testing import CliRunner

import memstore.cli.bench  # noqa: F401  registers the group on cli
from memstore.bench.recall_scale import LABELS, STEPS, format_recall_scale, pick_embedder
from memstore.cli.app import cli


def test_recall_scale_times_every_step(tmp_path: Path) -> None:
    out = tmp_path / "rs.json"
    args = ["bench", "recall-scale", "--messages", "300", "--memories", "40", "--queries", "6"]
    res = CliRunner().invoke(cli, [*args, "--embedder", "hashing", "--json", str(out)])
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())
    assert got["embedder"] == "hashing" and got["users"] == 1
    assert set(got["latency"]) == set(STEPS) == set(LABELS)
    for step in STEPS:
        s = got["latency"][step]
        assert s["n"] == 6 and s["p50_ms"] >= 0, step
        # Six samples cannot carry a tail: those percentiles are NaN, not a maximum.
        assert math.isnan(s["p95_ms"]) and math.isnan(s["p99_ms"]), step
    assert len(got["loadavg"]["before"]) == 3
    assert "Store.recall (+ query embedding)" in format_recall_scale(got)
    assert "ref: bare embed_query" in res.output


def test_auto_picks_e5_only_when_installed() -> None:
    assert pick_embedder("hashing") == "hashing"
    assert pick_embedder("auto") in ("e5", "hashing")
