"""bench locomo --recall: scoring of what recall injects, on a hand-made conversation.

No timing assertions: these check what the numbers are computed from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

import memstore.cli.bench  # noqa: F401  registers the group on cli
from memstore.bench.locomo import locomo_settings
from memstore.bench.locomo_recall import (
    CALIBRATION,
    HELD_OUT,
    SWEEP,
    RecallScores,
    _add_raw,
    format_recall_bench,
    run_recall_bench,
    score_question,
    seed_embedding_cache,
    verbatim,
)
from memstore.cli.app import cli
from memstore.store import Store
from tests.bench.test_bench_cli import _sample


def test_score_question_by_ids_and_verbatim() -> None:
    texts = {"D1:1": "Ana: I adopted a puppy called Miso last week.", "D1:3": "Ana: A shiba."}
    got = score_question({"D1:1", "D9:9"}, "nothing", ["D1:1", "D1:3"], texts)
    assert got == {"hit": 1.0, "evidence_recall": 0.5, "verbatim": 0.0}
    clipped = "[…] Ana: I adopted a puppy called Miso last week."
    got = score_question(set(), clipped, ["D1:1"], texts)
    assert got["hit"] == 0.0 and got["verbatim"] == 1.0
    assert verbatim("Ana: A shiba.", "x Ana: A shiba. y")
    assert not verbatim("Ana: I adopted a puppy called Miso last week.", "I adopted a puppy")


def test_off_topic_questions_count_only_when_something_is_injected() -> None:
    acc = RecallScores()
    _add_raw(acc, "", "stable only", set(), False, "calibration", [], {})
    _add_raw(acc, "x", "x", set(), True, "held_out", [], {})
    s = acc.summary()
    assert s["off_topic_injected"] == {"calibration": 0.0, "held_out": 1.0, "all": 0.5}
    assert s["overall"]["n"] == 0.0  # off-topic questions are never scored as LoCoMo ones
    assert not set(CALIBRATION) & set(HELD_OUT) and len(CALIBRATION) == len(HELD_OUT) == 20


def test_recall_bench_on_a_hand_made_conversation(tmp_path: Path) -> None:
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample()]))
    cache = tmp_path / "cache"
    res = run_recall_bench(data, embedder="hashing", cache=cache, progress=False)
    r = res["recall"]
    assert r["overall"]["n"] == 3
    # The puppy's name is said in D1:1 and asked for verbatim: it must get in.
    assert r["overall"]["hit"] > 0
    assert 0 < r["chars"]["mean"] <= res["budget_chars"]
    assert set(res["sweep"]) == {str(t) for t in SWEEP}
    # A gate of 0 lets everything found through, except for questions the
    # query-level gate refuses (small talk, names the store does not hold):
    # "What is the capital of Australia?" injects nothing even then.
    low = res["sweep"]["0.0"]["off_topic_injected"]["all"]
    assert 0.0 < low < 1.0
    # Off-topic injection can only fall as the gate rises.
    offs = [res["sweep"][str(t)]["off_topic_injected"]["all"] for t in SWEEP]
    assert offs == sorted(offs, reverse=True)
    assert "gate sweep" in format_recall_bench(res)
    # The store is cached: a second run reuses it.
    built = sorted(p.name for p in cache.iterdir())
    again = run_recall_bench(data, embedder="hashing", cache=cache, progress=False)
    assert sorted(p.name for p in cache.iterdir()) == built
    assert again["recall"]["overall"] == r["overall"]
    # Plain retrieval on the same store is reported next to recall.
    assert 0 <= r["search_recall@10"] <= 1 and r["search_filler_top3"] == 0
    assert "hybrid search on the same stores" in format_recall_bench(res)


def test_a_sibling_store_lends_its_embeddings(tmp_path: Path) -> None:
    """The chat-like store of a conversation starts from the clean one's
    embedding cache: those texts are not embedded again."""
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample()]))
    cache = tmp_path / "cache"
    run_recall_bench(data, embedder="hashing", cache=cache, progress=False)
    clean = next(cache.glob("*-clean-*.db"))
    with Store.open(tmp_path / "other.db", settings=locomo_settings("hashing")) as other:
        copied = seed_embedding_cache(other, clean)
        with other._db.read() as conn:
            have = conn.execute(text("SELECT count(*) FROM embedding_cache")).scalar()
    assert copied > 0 and have == copied


def test_cli_recall_with_holographic_and_chatlike(tmp_path: Path) -> None:
    pytest.importorskip("plugins.memory.holographic")
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample()]))
    out = tmp_path / "r.json"
    args = ["bench", "locomo", str(data), "--recall", "--embedder", "hashing"]
    res = CliRunner().invoke(
        cli, [*args, "--peers", "holographic", "--chatlike", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())
    assert got["variant"] == "chatlike"
    holo = got["peers"]["holographic"]
    assert "error" not in holo and holo["overall"]["n"] == 3
    assert "holographic prefetch" in res.output
