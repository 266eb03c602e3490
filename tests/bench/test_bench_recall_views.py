"""The views recall bench (``bench locomo --recall``): its scoring, the
off-topic list, cross-validation, on a hand-made LoCoMo-shaped sample with
the hashing embedder (real stores, real pipeline)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from click.testing import CliRunner

import memstore.cli.bench  # noqa: F401  registers the group on cli
from memstore.bench.locomo_data import parse_locomo
from memstore.bench.locomo_views import (
    Outcome,
    choose_gate,
    fold,
    off_topic_questions,
    outcome,
    run_views_bench,
    view_text,
)
from memstore.cli.app import cli
from memstore.recall.compose import RecalledMessage
from tests.bench.test_bench_cli import _sample


def _msg(mid: str) -> RecalledMessage:
    return RecalledMessage(mid, "s", "2023-05-08", "user", "Ana", "x", False, 1.0)


def test_off_topic_list_has_every_kind_in_both_halves() -> None:
    halves = off_topic_questions()
    assert len(halves["calibration"]) + len(halves["held_out"]) >= 100
    kinds = {"general", "coding", "writing", "arithmetic", "small_talk", "absent_people"}
    for qs in halves.values():
        assert {k for k, _ in qs} == kinds
    assert not {q for _, q in halves["calibration"]} & {q for _, q in halves["held_out"]}


def test_an_evidence_turn_reaches_by_id_or_by_its_words() -> None:
    words = {"D1:1": fold("I adopted a puppy called   Miso last week.")[:80], "D1:2": "zzz"}
    by_id = outcome("", "", [], [_msg("D1:2")], ["D1:1", "D1:2"], words)
    assert (by_id.coverage, by_id.hit, by_id.injected) == (0.5, 1.0, True)
    by_words = outcome("- I ADOPTED a puppy called Miso last week.", "x", [], [], ["D1:1"], words)
    assert by_words.coverage == 1.0 and not by_words.injected
    assert outcome("nothing", "", [], [], ["D1:1"], words).hit == 0.0


def test_view_text_shows_a_photo_and_the_name_only_when_asked() -> None:
    conv = parse_locomo([_sample()])[0]
    photo = next(t for t in conv.turns if t.image_caption)
    assert view_text(photo, False).endswith("[shares a photo: a runner crossing a finish line]")
    assert "[image:" not in view_text(photo, False)
    assert view_text(photo, True).startswith("Ana: ")


def test_the_gate_is_chosen_within_the_off_topic_target() -> None:
    from memstore.bench.locomo_views import AGREES, SWEEP, ConvResult

    def o(cov: float, inj: bool) -> Outcome:
        return Outcome(cov, 1.0 if cov else 0.0, 10, 5, inj)

    # Low thresholds find more and inject off-topic; the best within 10% wins.
    swept_q = {(a, t): o(1.0 if t <= 1.0 else 0.0, True) for a in AGREES for t in SWEEP}
    swept_off = {(a, t): o(float("nan"), t < 1.0) for a in AGREES for t in SWEEP}
    r = ConvResult("c", [(1, swept_q[0.0, 1.0], swept_q)], [])
    r.off_topic = [("calibration", "general", swept_off[0.0, 1.0], swept_off)]
    assert choose_gate([r])[1] == 1.0


def test_views_bench_runs_both_views_and_cross_validates(tmp_path: Path) -> None:
    one = _sample()
    two = copy.deepcopy(one)
    two["sample_id"] = "conv-test-2"
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([one, two]))
    res = run_views_bench(
        data, embedder="hashing", views=("agent", "group"), cache=tmp_path / "c", progress=False
    )
    for view in ("agent", "group"):
        v = res["views"][view]
        d = v["default"]
        assert d["overall"]["n"] == 2 * 3
        assert 0.0 <= d["overall"]["coverage"] <= d["overall"]["hit"] <= 1.0
        assert 0 < d["chars"] <= res["budget_chars"]
        # Small talk never injects anything.
        assert d["off_topic_by_kind"]["small_talk"] == 0.0
        cv = v["cross_validated"]
        assert set(cv["thresholds"]) == {"conv-test", "conv-test-2"}
    out = CliRunner().invoke(
        cli,
        [
            "bench",
            "locomo",
            str(data),
            "--recall",
            "--embedder",
            "hashing",
            "--views",
            "group",
            "--cache",
            str(tmp_path / "c"),
            "--json",
            str(tmp_path / "r.json"),
        ],
    )
    assert out.exit_code == 0, out.output
    assert "group / cross_validated" in out.output
    assert json.loads((tmp_path / "r.json").read_text())["views"]["group"]["default"]
    bad = CliRunner().invoke(cli, ["bench", "locomo", str(data), "--recall", "--views", "x"])
    assert bad.exit_code != 0
