"""Layer-quality plumbing (--layers), peers (--peers) and the scale command, at tiny sizes.

No timing assertions: these check that the numbers are computed from the right
things (memories traced to evidence through their source ids), not how fast.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

import memstore.cli.bench  # noqa: F401  registers the group on cli
from memstore.bench.layers import merge_by_score, sources, trace_at_k, trace_set
from memstore.bench.locomo import run_locomo
from memstore.cli.app import cli
from tests.bench.test_bench_cli import _sample


def test_trace_at_k_counts_memories_through_their_sources() -> None:
    ranked = [["D1:2"], [], ["D1:1", "D2:3"], ["D2:1"]]
    got = trace_at_k(ranked, ["D1:1", "D2:1"])
    assert got["hit@1"] == 0.0 and got["evidence_recall@1"] == 0.0
    assert got["hit@5"] == 1.0 and got["evidence_recall@5"] == 1.0
    # The third memory alone covers one of the two evidence turns.
    assert trace_at_k(ranked[:3], ["D1:1", "D2:1"])["evidence_recall@10"] == 0.5


def test_trace_set_and_empty_evidence() -> None:
    got = trace_set([["D3:4"], ["D3:4", "D3:5"]], ["D3:5", "D9:9"])
    assert got == {"hit": 1.0, "evidence_recall": 0.5, "memories": 2.0}
    assert trace_set([], ["D1:1"])["hit"] == 0.0
    assert math.isnan(trace_set([["D1:1"]], [])["evidence_recall"])


def test_merge_by_score_is_stable_across_lists() -> None:
    a = [(0.9, ["a1"]), (0.5, ["a2"])]
    b = [(0.9, ["b1"]), (0.7, ["b2"])]
    assert merge_by_score([a, b], 3) == [["a1"], ["b1"], ["b2"]]


def test_sources_accepts_json_text_and_lists() -> None:
    assert sources({"source_message_ids": '["D1:1", "D1:2"]'}) == ["D1:1", "D1:2"]
    assert sources({"source_message_ids": ["D1:1"]}) == ["D1:1"]
    assert sources({}) == []


def test_layers_on_a_hand_made_conversation(tmp_path: Path) -> None:
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample()]))
    res = run_locomo(data, embedder="hashing", layers=True, workdir=tmp_path, progress=False)
    lay = res["layers"]
    assert lay["deriver"] == "rules (offline)"
    assert set(lay["memories_per_user"]) == {"conv-test", "conv-test~b"}
    assert lay["memories_total"] == lay["memories_with_sources"] > 0
    assert lay["search"]["overall"]["n"] == 3 and lay["recall"]["overall"]["n"] == 3
    # Every memory the rules derive here comes from a first-person turn with an id.
    ids = {"D1:1", "D1:2", "D1:3", "D2:1", "D2:2", "D2:3"}
    assert lay["recall_block_chars"]["p50"] > 0
    for key in ("hit@10", "evidence_recall@10"):
        assert 0.0 <= lay["search"]["overall"][key] <= 1.0
    assert ids  # the sample's turn ids, for the reader


def test_cli_layers_and_holographic_peer(tmp_path: Path) -> None:
    pytest.importorskip("plugins.memory.holographic")
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample()]))
    out = tmp_path / "r" / "locomo.json"
    r = CliRunner().invoke(
        cli,
        [
            "bench", "locomo", str(data), "--embedder", "hashing", "--no-variants",
            "--layers", "--peers", "holographic", "--json", str(out), "--workdir", str(tmp_path),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "memory layers (L1)" in r.output and "holographic" in r.output
    res = json.loads(out.read_text())
    holo = res["peers"]["holographic"]
    assert holo["ok"], holo["error"]
    assert holo["scores"]["overall"]["n"] == 3 and holo["add"]["n"] == 6
    assert res["capture_ms"]["n"] == 6

    md, images = tmp_path / "B.md", tmp_path / "img"
    r = CliRunner().invoke(
        cli,
        [
            "bench",
            "report",
            "--results",
            str(out.parent),
            "--out",
            str(md),
            "--images",
            str(images),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "Peers on the same data" in md.read_text()


@pytest.mark.slow  # imports mem0 and serves embeddings over HTTP
@pytest.mark.skipif(importlib.util.find_spec("mem0") is None, reason="mem0ai not installed")
def test_mem0_peer_through_the_loopback_embedding_server(tmp_path: Path) -> None:
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample()]))
    res = run_locomo(data, embedder="hashing", peers=["mem0"], workdir=tmp_path, progress=False)
    m0 = res["peers"]["mem0"]
    assert m0["ok"], m0["error"]
    assert m0["scores"]["overall"]["n"] == 3 and m0["search"]["n"] == 3
    # Dense search over the same vectors, minus what its score threshold (0.1) drops:
    # never above memstore's dense baseline on the same turns.
    dense = res["systems"]["dense"]["overall"]["recall@20"]
    assert 0 < m0["scores"]["overall"]["recall@20"] <= dense


def test_unknown_peer_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample()]))
    r = CliRunner().invoke(cli, ["bench", "locomo", str(data), "--peers", "zep"])
    assert r.exit_code != 0 and "peers must be among" in r.output


@pytest.mark.slow  # the whole scale benchmark at two sizes, with the indexer
def test_bench_scale_tiny(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    r = CliRunner().invoke(
        cli,
        [
            "bench", "scale", "--sizes", "200,400", "--queries", "3", "--turns", "25",
            "--json", str(out), "--workdir", str(tmp_path),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "ref numpy cosine" in r.output and "rebuild ev/s" in r.output
    assert "capture working / stopped" in r.output and "ref FTS5 alone, same user" in r.output
    res = json.loads(out.read_text())
    assert [run["size"] for run in res["runs"]] == [200, 400]
    run = res["runs"][0]
    assert run["capture"]["n"] == run["capture_idle"]["n"] == 25
    # 25 samples: p95 is printed, p99 is not (it would be the largest sample).
    assert run["capture"]["p95_ms"] > 0 and math.isnan(run["capture"]["p99_ms"])
    assert run["search"]["keyword_l0"]["n"] == 3
    assert run["rebuild"]["events"] > 200 and run["rss_mb"]["peak"] > 0
    md, images = tmp_path / "B.md", tmp_path / "img"
    r = CliRunner().invoke(
        cli,
        ["bench", "report", "--results", str(tmp_path), "--out", str(md), "--images", str(images)],
    )
    assert r.exit_code == 0, r.output
    assert (images / "scale.png").stat().st_size > 0
