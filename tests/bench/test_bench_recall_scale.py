"""bench recall-scale: the recall latency benchmark's plumbing, at a tiny size.

No timing assertions (the numbers belong in BENCHMARKS.md): this checks that
every step is timed for every query and that the command writes its JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from click.testing import CliRunner

import memstore.cli.bench  # noqa: F401  registers the group on cli
from memstore.bench.recall_scale import (
    LABELS,
    STEPS,
    MemoEmbedder,
    format_recall_scale,
    pick_embedder,
)
from memstore.cli.app import cli
from memstore.embeddings.hashing import HashingEmbedder


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
    # The build leaves FTS5's segments as they came; timing starts after a merge.
    assert got["fts_tidy_steps"] >= 1
    assert "Store.recall (+ query embedding)" in format_recall_scale(got)
    assert "ref: bare embed_query" in res.output


def test_auto_picks_e5_only_when_installed() -> None:
    assert pick_embedder("hashing") == "hashing"
    assert pick_embedder("auto") in ("e5", "hashing")


def test_keep_reuses_the_built_store(tmp_path: Path) -> None:
    keep = tmp_path / "kept.db"
    args = ["bench", "recall-scale", "--messages", "200", "--memories", "20", "--queries", "2"]
    args += ["--embedder", "hashing", "--keep", str(keep)]
    outs = []
    for i in range(2):
        out = tmp_path / f"rs{i}.json"
        res = CliRunner().invoke(cli, [*args, "--json", str(out)])
        assert res.exit_code == 0, res.output
        outs.append(json.loads(out.read_text()))
    assert keep.exists()
    # The second run timed the first run's store: its build record, unchanged.
    assert outs[1]["build_s"] == outs[0]["build_s"]
    assert outs[0]["embedded_rows"] >= 220
    # Another shape is built afresh, in the same place.
    res = CliRunner().invoke(cli, [*args[:3], "150", *args[4:]])
    assert res.exit_code == 0, res.output


def test_memo_embedder_embeds_each_distinct_text_once() -> None:
    inner = HashingEmbedder()
    memo = MemoEmbedder(inner)
    texts = ["a cat", "a dog", "a cat", "a bird", "a dog"]
    got = memo.embed_documents(texts)
    assert memo.asked == 5 and memo.embedded == 3
    assert np.array_equal(got, inner.embed_documents(texts))
    memo.embed_documents(["a cat"])
    assert memo.embedded == 3 and memo.embed_documents([]).shape == (0, inner.dimensions)
