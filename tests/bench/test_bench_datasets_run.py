"""The recall-by-view bench and the QA harness on BEAM and LoCoMo-Plus samples
(hand-made, in each data set's format): real stores, hashing embedder, the
fake OpenAI server for the QA harness."""

from __future__ import annotations

import json
import math
from pathlib import Path

from click.testing import CliRunner

import memstore.cli.bench  # noqa: F401  registers the group on cli
from memstore.bench.locomo_qa import Chat, format_qa, run_qa
from memstore.bench.locomo_views import format_views_bench, run_views_bench
from memstore.cli.app import cli
from tests.bench.test_bench_qa import _fake
from tests.bench_data_support import write_beam, write_plus
from tests.fakeopenai import FakeOpenAI


def test_views_bench_scores_beam_by_its_question_types(tmp_path: Path) -> None:
    res = run_views_bench(
        write_beam(tmp_path / "beam", (1,)),
        embedder="hashing",
        views=("agent",),
        cache=tmp_path / "c",
        progress=False,
    )
    assert res["format"] == "beam"
    d = res["views"]["agent"]["default"]
    # Abstention has no evidence: the four other sample questions are scored.
    assert d["overall"]["n"] == 4.0
    assert sorted(d["per_category"], key=int) == ["2", "4", "5", "9"]
    # The release date is asked in nearly the words it was said in.
    assert d["per_category"]["4"]["hit"] == 1.0
    assert 0.0 <= d["overall"]["coverage"] <= d["overall"]["hit"] <= 1.0
    out = format_views_bench(res)
    assert "recall on beam" in out and "c4 information_extraction" in out
    assert "cov c10" in out  # a type with no sample question shows as nan
    assert math.isnan(d["per_category"].get("10", {}).get("coverage", math.nan))


def test_recall_cli_reads_locomo_plus_and_scores_the_cue(tmp_path: Path) -> None:
    plus = write_plus(tmp_path / "plus")
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        cli,
        [
            "bench",
            "locomo",
            str(plus),
            "--recall",
            "--embedder",
            "hashing",
            "--views",
            "group",
            "--cache",
            str(tmp_path / "c"),
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    saved = json.loads(out.read_text())
    assert saved["format"] == "locomo-plus" and saved["categories"] == {"6": "cognitive"}
    d = saved["views"]["group"]["default"]
    assert d["overall"]["n"] == 3.0 and list(d["per_category"]) == ["6"]
    # Search quality has no BEAM or LoCoMo-Plus scoring: refused, not miscounted.
    bad = CliRunner().invoke(cli, ["bench", "locomo", str(plus), "--no-variants"])
    assert bad.exit_code != 0 and "--recall" in bad.output


def test_qa_harness_grades_beam_questions_that_have_a_gold_answer(tmp_path: Path) -> None:
    with FakeOpenAI(chat=_fake) as fake:
        chat = Chat(fake.base_url, "answerer")
        res = run_qa(
            write_beam(tmp_path / "beam", (1,)),
            answer=chat,
            judge=Chat(fake.base_url, "judge"),
            contexts=["none", "full"],
            embedder="hashing",
            workdir=tmp_path,
        )
    full = res["contexts"]["full"]
    # Five sample questions; instruction following has no gold answer.
    assert full["overall"]["n"] == 4.0
    assert sorted(full["per_category"], key=int) == ["1", "2", "4", "9"]
    assert full["per_category"]["4"]["accuracy"] == 1.0  # "February 2" is in the chat
    assert res["contexts"]["none"]["per_category"]["4"]["accuracy"] == 0.0
    assert "9 summarization" in format_qa(res)
