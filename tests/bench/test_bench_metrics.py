"""Retrieval metrics on hand-made rankings, and the LoCoMo reader on tiny
hand-made samples (never the real data set)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.bench.locomo_data import (
    load_locomo,
    parse_evidence,
    parse_locomo,
    parse_session_date,
    summarize_evidence,
)
from memstore.bench.metrics import hit_at_k, mean, mrr, ndcg_at_k, percentile, recall_at_k
from memstore.errors import InvalidInputError

RETRIEVED = ["a", "b", "c", "d", "e"]
RELEVANT = {"b", "e", "z"}  # "z" is never retrieved


# ---------------------------------------------------------------- ranking metrics


def test_recall_at_k() -> None:
    assert recall_at_k(RETRIEVED, RELEVANT, 1) == 0.0
    assert recall_at_k(RETRIEVED, RELEVANT, 2) == pytest.approx(1 / 3)
    assert recall_at_k(RETRIEVED, RELEVANT, 5) == pytest.approx(2 / 3)
    assert recall_at_k(RETRIEVED, RELEVANT, 50) == pytest.approx(2 / 3)  # k > len
    assert recall_at_k([], RELEVANT, 5) == 0.0


def test_hit_at_k() -> None:
    assert hit_at_k(RETRIEVED, RELEVANT, 1) == 0.0
    assert hit_at_k(RETRIEVED, RELEVANT, 2) == 1.0
    assert hit_at_k(RETRIEVED, ["z"], 5) == 0.0


def test_ndcg_at_k() -> None:
    # Hits at ranks 2 and 5; the ideal puts min(5, 3) = 3 hits at ranks 1-3.
    dcg = 1 / math.log2(3) + 1 / math.log2(6)
    ideal = 1 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(RETRIEVED, RELEVANT, 5) == pytest.approx(dcg / ideal)
    assert ndcg_at_k(RETRIEVED, RELEVANT, 5) == pytest.approx(0.47762, abs=1e-5)
    # k = 2: one hit at rank 2; ideal over min(2, 3) = 2 ranks.
    assert ndcg_at_k(RETRIEVED, RELEVANT, 2) == pytest.approx(
        (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    )
    assert ndcg_at_k(["b", "e"], {"b", "e"}, 10) == 1.0
    assert ndcg_at_k(["x", "y"], {"b"}, 10) == 0.0


def test_duplicates_count_once() -> None:
    assert recall_at_k(["b", "b", "b"], {"b", "c"}, 3) == 0.5
    assert ndcg_at_k(["b", "b", "b"], {"b"}, 3) == 1.0
    # The second "b" is not a new hit: DCG has only the rank-1 term.
    assert ndcg_at_k(["b", "b", "c"], {"b", "c"}, 3) == pytest.approx(
        (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    )


def test_mrr() -> None:
    assert mrr(RETRIEVED, RELEVANT) == 0.5
    assert mrr(["a", "b", "c"], {"c"}) == pytest.approx(1 / 3)
    assert mrr(["a", "b", "c"], {"c"}, k=2) == 0.0
    assert mrr(["x"], {"c"}) == 0.0


def test_empty_relevant_and_bad_k_raise_value_error() -> None:
    for fn in (recall_at_k, hit_at_k, ndcg_at_k):
        with pytest.raises(ValueError):
            fn(RETRIEVED, set(), 5)
        with pytest.raises(InvalidInputError):
            fn(RETRIEVED, RELEVANT, 0)
    with pytest.raises(ValueError):
        mrr(RETRIEVED, [])


@settings(max_examples=200)
@given(
    st.lists(st.sampled_from("abcdefgh"), max_size=12),
    st.sets(st.sampled_from("abcdefghij"), min_size=1),
    st.integers(1, 15),
)
def test_metrics_stay_in_unit_interval(retrieved: list[str], relevant: set[str], k: int) -> None:
    for fn in (recall_at_k, hit_at_k, ndcg_at_k):
        assert 0.0 <= fn(retrieved, relevant, k) <= 1.0 + 1e-12
    assert recall_at_k(retrieved, relevant, k) <= recall_at_k(retrieved, relevant, k + 1)
    assert (hit_at_k(retrieved, relevant, k) > 0) == (recall_at_k(retrieved, relevant, k) > 0)


# ---------------------------------------------------------------- percentile, mean


def test_percentile_by_hand() -> None:
    assert percentile([4, 1, 3, 2], 50) == 2.5  # position 1.5 between 2 and 3
    assert percentile([1, 2, 3, 4], 25) == 1.75  # position 0.75
    assert percentile([1, 2, 3, 4], 0) == 1
    assert percentile([1, 2, 3, 4], 100) == 4
    assert percentile([10, 20], 90) == pytest.approx(19.0)
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
    for bad in (-1, 101, math.nan):
        with pytest.raises(ValueError):
            percentile([1.0], bad)


@settings(max_examples=200)
@given(
    st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=30),
    st.floats(0, 100),
)
def test_percentile_matches_numpy_linear(values: list[float], p: float) -> None:
    assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)), abs=1e-6)


def test_mean() -> None:
    assert mean([1.0, 2.0, 4.0]) == pytest.approx(7 / 3)
    assert math.isnan(mean([]))


# ---------------------------------------------------------------- evidence ids


@pytest.mark.parametrize(
    ("raw", "valid", "bad"),
    [
        (["D1:3"], ["D1:3"], []),
        (["D8:6; D9:17"], ["D8:6", "D9:17"], []),
        (["D:11:26"], ["D11:26"], []),
        (["D10:19,D10:20"], ["D10:19", "D10:20"], []),
        (["D2:1 D2:2"], ["D2:1", "D2:2"], []),
        ([" D3:5 \n"], ["D3:5"], []),
        (["D01:03"], ["D1:3"], []),
        (["d4:1"], ["D4:1"], []),
        (["D1:3", "D1:3", "D:1:3"], ["D1:3"], []),
        (["D"], [], ["D"]),
        (["D1:18", "D", "D1:20"], ["D1:18", "D1:20"], ["D"]),
        (["S1:2", "", "D1", "D1:x"], [], ["S1:2", "D1", "D1:x"]),
        ([], [], []),
    ],
)
def test_parse_evidence(raw: list[str], valid: list[str], bad: list[str]) -> None:
    assert parse_evidence(raw) == (valid, bad)


# ---------------------------------------------------------------- session dates


def test_parse_session_date() -> None:
    assert parse_session_date("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert parse_session_date("12:09 am on 13 September, 2023") == datetime(
        2023, 9, 13, 0, 9, tzinfo=UTC
    )
    assert parse_session_date(" 10:04  AM on 19 Dec, 2023 ") == datetime(
        2023, 12, 19, 10, 4, tzinfo=UTC
    )
    with pytest.raises(InvalidInputError):
        parse_session_date("yesterday")


# ---------------------------------------------------------------- whole samples


def _sample() -> dict[str, Any]:
    # Hand-made, in the LoCoMo shape; sessions deliberately out of key order
    # and numbered past 9 to catch lexicographic sorting.
    return {
        "sample_id": "tiny-1",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Ben",
            "session_10_date_time": "9:00 am on 2 June, 2023",
            "session_10": [{"speaker": "Ann", "dia_id": "D10:1", "text": "Back from Rome."}],
            "session_2_date_time": "8:30 pm on 1 June, 2023",
            "session_2": [
                {"speaker": "Ann", "dia_id": "D2:1", "text": "I adopted a cat."},
                {
                    "speaker": "Ben",
                    "dia_id": "D2:2",
                    "text": "Look!",
                    "img_url": ["http://example.invalid/x.jpg"],
                    "blip_caption": "a photo of a tabby cat",
                },
            ],
            "session_3_date_time": "10:00 am on 5 June, 2023",  # date, no turns
        },
        "qa": [
            {"question": "What pet?", "answer": "a cat", "evidence": ["D2:1"], "category": 4},
            {"question": "Year?", "answer": 2023, "evidence": ["D2:1; D10:1"], "category": 2},
            {"question": "Gone?", "evidence": ["D9:9", "D"], "category": 1, "answer": "x"},
            {"question": "Dog?", "adversarial_answer": "Rex", "evidence": [], "category": 5},
        ],
    }


def test_parse_locomo_turns() -> None:
    [conv] = parse_locomo([_sample()])
    assert (conv.sample_id, conv.speaker_a, conv.speaker_b) == ("tiny-1", "Ann", "Ben")
    assert [t.dia_id for t in conv.turns] == ["D2:1", "D2:2", "D10:1"]
    assert [t.session_index for t in conv.turns] == [2, 2, 10]
    start = datetime(2023, 6, 1, 20, 30, tzinfo=UTC)
    assert [t.occurred_at for t in conv.turns[:2]] == [start, start + timedelta(seconds=1)]
    assert conv.turns[2].occurred_at == datetime(2023, 6, 2, 9, 0, tzinfo=UTC)
    image = conv.turns[1]
    assert image.image_caption == "a photo of a tabby cat"
    assert image.text == "Look! [image: a photo of a tabby cat]"
    assert conv.turns[0].image_caption is None and conv.turns[0].text == "I adopted a cat."


def test_parse_locomo_questions() -> None:
    [conv] = parse_locomo(_sample())  # a single sample object is accepted too
    q1, q2, q3, q4 = conv.questions
    assert (q1.answer, q1.category, q1.evidence, q1.skipped_evidence) == ("a cat", 4, ["D2:1"], [])
    assert q2.answer == "2023" and q2.evidence == ["D2:1", "D10:1"]
    # "D" is unparseable; "D9:9" is well formed but names no turn.
    assert q3.evidence == [] and q3.skipped_evidence == ["D", "D9:9"]
    assert (q4.answer, q4.adversarial_answer, q4.evidence) == ("", "Rex", [])
    summary = summarize_evidence([conv])
    assert (summary.entries, summary.clean, summary.repaired) == (4, 2, 1)
    assert (summary.unparseable, summary.dangling, summary.questions_without_evidence) == (1, 1, 2)


def test_load_locomo_file_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([_sample()]), encoding="utf-8")
    assert load_locomo(path)[0].sample_id == "tiny-1"
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(InvalidInputError):
        load_locomo(tmp_path / "bad.json")
    with pytest.raises(InvalidInputError):
        load_locomo(tmp_path / "missing.json")
    broken = _sample()
    del broken["conversation"]["session_2_date_time"]
    with pytest.raises(InvalidInputError, match="session_2"):
        parse_locomo([broken])
    with pytest.raises(InvalidInputError):
        parse_locomo("nope")
