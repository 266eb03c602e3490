"""Each bench command runs at a tiny size and prints/writes its figures (no timing asserts)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import memstore.cli.bench  # noqa: F401  registers the group on cli
from memstore.cli.app import cli


def _sample() -> dict[str, Any]:
    # A hand-made conversation in LoCoMo's shape (the real data is never bundled).
    s1 = [
        {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a puppy called Miso last week."},
        {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely! What breed is Miso?"},
        {"speaker": "Ana", "dia_id": "D1:3", "text": "A shiba inu. She loves the beach."},
    ]
    s2 = [
        {"speaker": "Bo", "dia_id": "D2:1", "text": "I ran the Berlin marathon on Sunday."},
        {
            "speaker": "Ana",
            "dia_id": "D2:2",
            "text": "Congrats! How long did it take?",
            "blip_caption": "a runner crossing a finish line",
        },
        {"speaker": "Bo", "dia_id": "D2:3", "text": "Four hours and ten minutes."},
    ]
    return {
        "sample_id": "conv-test",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": s1,
            "session_2_date_time": "10:00 am on 20 May, 2023",
            "session_2": s2,
        },
        "qa": [
            {
                "question": "What is the name of Ana's puppy?",
                "answer": "Miso",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "When did Bo run the marathon?",
                "answer": "May 2023",
                "evidence": ["D2:1"],
                "category": 2,
            },
            {
                "question": "What breed is the puppy and where does it like to go?",
                "answer": "shiba inu, beach",
                "evidence": ["D1:3; D1:1"],
                "category": 1,
            },
            {
                "question": "What did Bo eat?",
                "adversarial_answer": "x",
                "evidence": [],
                "category": 5,
            },
        ],
    }


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.mark.slow  # the whole benchmark: appends at three batch sizes and a rebuild
def test_bench_eventlog(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "ev.json"
    r = runner.invoke(
        cli,
        [
            *("bench", "eventlog", "--n", "1000", "--messages", "400"),
            *("--json", str(out), "--workdir", str(tmp_path)),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "1000 per transaction" in r.output and "rebuild" in r.output
    data = json.loads(out.read_text())
    assert [a["per_txn"] for a in data["append"]] == [1, 100, 1000]
    assert data["rebuild"]["events_per_s"] > 0 and "command" in data["meta"]
    # The rebuilt log is conversation-like text captured one turn per call.
    assert data["rebuild"]["events"] == 200
    assert data["rebuild"]["text_bytes_per_message"] > 150


@pytest.mark.slow  # the whole benchmark: two layouts, capture and search timings
def test_bench_search_and_capture(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "cs.json"
    r = runner.invoke(
        cli,
        [
            "bench",
            "search",
            "--sizes",
            "200",
            "--embedder",
            "hashing",
            "--queries",
            "3",
            "--json",
            str(out),
            "--workdir",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "ref numpy cosine" in r.output and "capture p50/p99" in r.output
    data = json.loads(out.read_text())
    assert {run["layout"] for run in data["runs"]} == {"1 user", "100 users"}
    hybrid = data["runs"][0]["search"]["hybrid"]
    # 3 queries: a median, but no p95 (it would only be the largest of three).
    assert hybrid["p50_ms"] > 0 and hybrid["n"] == 3 and math.isnan(hybrid["p95_ms"])


def test_bench_locomo_and_report(runner: CliRunner, tmp_path: Path) -> None:
    data_file = tmp_path / "locomo.json"
    data_file.write_text(json.dumps([_sample()]))
    results = tmp_path / "results"
    r = runner.invoke(
        cli,
        [
            "bench",
            "locomo",
            str(data_file),
            "--embedder",
            "hashing",
            "--json",
            str(results / "locomo.json"),
            "--workdir",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "bm25" in r.output and "dense" in r.output and "fusion variants" in r.output
    res = json.loads((results / "locomo.json").read_text())
    assert res["questions_scored"] == 3
    assert set(res["systems"]) == {"keyword", "vector", "hybrid", "bm25", "dense"}
    # The puppy question's evidence is the first turn: every system should rank it.
    assert res["systems"]["keyword"]["overall"]["recall@20"] > 0

    md, images = tmp_path / "BENCHMARKS.md", tmp_path / "img"
    r = runner.invoke(
        cli,
        ["bench", "report", "--results", str(results), "--out", str(md), "--images", str(images)],
    )
    assert r.exit_code == 0, r.output
    text = md.read_text()
    assert "LoCoMo" in text and "Not run for this report" in text
    assert (images / "locomo_recall.png").stat().st_size > 0


def test_every_bench_command_has_an_example() -> None:
    group = cli.commands["bench"]
    assert isinstance(group, click.Group)
    for name, cmd in group.commands.items():
        assert "Example:" in (cmd.help or ""), name


def test_bench_scale_layout_alone_runs_the_per_layout_bench(
    runner: CliRunner, tmp_path: Path
) -> None:
    """``--layout`` without ``--db`` used to fall back to the N-sizes run and
    ignore the layout; it now runs the per-layout bench on SQLite."""
    out = tmp_path / "layout.json"
    r = runner.invoke(
        cli,
        ["bench", "scale", "--layout", "2x30", "--queries", "2", "--turns", "3",
         "--sessions", "0", "--json", str(out), "--workdir", str(tmp_path)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["layouts"] == ["2x30"] and list(data["runs"]) == ["sqlite 2x30"], data["runs"]


def test_bench_scale_rejects_options_of_both_runs(runner: CliRunner, tmp_path: Path) -> None:
    r = runner.invoke(cli, ["bench", "scale", "--sizes", "100", "--layout", "2x30"])
    assert r.exit_code != 0
    assert "use one group" in r.output
