"""bench locomo --qa: the answer-and-judge harness, against the fake OpenAI server.

These test the harness (what each context hands the model, how answers are
graded and counted), not a score: the fake "model" answers with the memory
context it was given, and the fake "judge" says CORRECT when the gold answer's
words are in that answer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import memstore.cli.bench  # noqa: F401  registers the group on cli
from memstore.bench.locomo_data import parse_locomo
from memstore.bench.locomo_qa import (
    ANSWER_SYSTEM,
    JUDGE_SYSTEM,
    Chat,
    format_qa,
    parse_label,
    run_qa,
    transcript,
)
from memstore.cli.app import cli
from memstore.errors import InvalidInputError
from tests.bench.test_bench_cli import _sample
from tests.fakeopenai import FakeOpenAI

_WORDS = re.compile(r"\w+")


def _fake(request: dict[str, Any]) -> str:
    system = request["messages"][0]["content"]
    user = request["messages"][-1]["content"]
    if system == JUDGE_SYSTEM:
        gold = user.split("Gold answer: ", 1)[1].split("\n", 1)[0]
        answer = user.split("Generated answer: ", 1)[1].lower()
        ok = all(w in answer for w in _WORDS.findall(gold.lower()))
        return json.dumps({"reasoning": "fake", "label": "CORRECT" if ok else "WRONG"})
    assert system == ANSWER_SYSTEM
    memory = user.split("Memory context:\n", 1)[1].rsplit("\n\nQuestion: ", 1)[0]
    return memory if memory != "(no memory)" else "I don't know."


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([_sample()]))
    return path


def test_judge_labels_are_read_from_json_or_words() -> None:
    assert parse_label('{"reasoning": "same city", "label": "correct"}') == "CORRECT"
    assert parse_label('Sure. {"label": "WRONG"}') == "WRONG"
    assert parse_label("The answer is CORRECT.") == "CORRECT"
    assert parse_label('{"label": "maybe"} then WRONG') == "WRONG"
    assert parse_label("no idea") is None


def test_the_full_context_is_every_session_with_its_date() -> None:
    conv = parse_locomo([_sample()])[0]
    full = transcript(conv)
    assert "Ana: I adopted a puppy called Miso last week." in full
    assert "[shares a photo: a runner crossing a finish line]" in full
    assert full.count("[session ") == 2


def test_contexts_are_answered_and_graded(data: Path, tmp_path: Path) -> None:
    with FakeOpenAI(chat=_fake) as fake:
        chat = Chat(fake.base_url, "answerer")
        judge = Chat(fake.base_url, "judge")
        res = run_qa(
            data,
            answer=chat,
            judge=judge,
            contexts=["memstore", "none", "full"],
            embedder="hashing",
            workdir=tmp_path,
        )
        models = [r["model"] for r in fake.chat_requests()]
    # 3 scored questions (category 5 left out) x 3 contexts, each answered then judged
    assert models.count("answerer") == 9 and models.count("judge") == 9
    ctx = res["contexts"]
    assert {k: v["overall"]["n"] for k, v in ctx.items()} == {
        "memstore": 3.0,
        "none": 3.0,
        "full": 3.0,
    }
    assert ctx["none"]["overall"]["accuracy"] == 0.0
    assert ctx["none"]["context_chars"] == 0.0
    # the whole conversation holds "Miso" and "shiba inu ... beach"
    assert ctx["full"]["per_category"]["4"]["accuracy"] == 1.0
    assert ctx["full"]["per_category"]["1"]["accuracy"] == 1.0
    assert ctx["full"]["prompt_tokens"] > ctx["none"]["prompt_tokens"] > 0
    # memstore's recall found the puppy's name for the single-hop question
    assert ctx["memstore"]["per_category"]["4"]["accuracy"] == 1.0
    assert ctx["memstore"]["context_chars"] > 0
    out = format_qa(res)
    assert "memstore" in out and "full" in out and "J c4" in out


def test_unknown_context_is_refused(data: Path) -> None:
    chat = Chat("http://127.0.0.1:1/v1", "m")
    with pytest.raises(InvalidInputError, match="contexts must be among"):
        run_qa(data, answer=chat, judge=chat, contexts=["mem0"])


def test_cli_needs_an_endpoint_and_runs_against_one(data: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["bench", "locomo", str(data), "--qa"])
    assert res.exit_code != 0 and "--llm-base-url" in res.output
    out = tmp_path / "qa.json"
    with FakeOpenAI(chat=_fake) as fake:
        res = runner.invoke(
            cli,
            [
                "bench",
                "locomo",
                str(data),
                "--qa",
                "--llm-base-url",
                fake.base_url,
                "--llm-model",
                "m",
                "--contexts",
                "none,full",
                "--questions",
                "2",
                "--json",
                str(out),
            ],
        )
    assert res.exit_code == 0, res.output
    saved = json.loads(out.read_text())
    assert saved["contexts"]["full"]["overall"]["n"] == 2.0
    assert saved["judge_model"] == "m"
