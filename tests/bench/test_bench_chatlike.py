"""The chat-like LoCoMo variant: filler inserted deterministically, never evidence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memstore.bench.locomo import format_locomo, run_locomo
from memstore.bench.locomo_chatlike import (
    FILLER_REPLIES,
    FILLER_SPEAKER,
    is_filler_id,
    make_chatlike,
)
from memstore.bench.locomo_data import parse_evidence, parse_locomo


def _sample(sample_id: str, sessions: int = 3, turns: int = 30) -> dict[str, Any]:
    conv: dict[str, Any] = {"speaker_a": "Ann", "speaker_b": "Bob"}
    for s in range(1, sessions + 1):
        conv[f"session_{s}_date_time"] = f"1:56 pm on {s} May, 2023"
        conv[f"session_{s}"] = [
            {"speaker": "Ann" if t % 2 else "Bob", "dia_id": f"D{s}:{t}", "text": f"turn {s} {t}"}
            for t in range(1, turns + 1)
        ]
    qa = [
        {"question": "q1", "answer": "a", "category": 1, "evidence": ["D1:3", "D2:5"]},
        {"question": "q2", "answer": "b", "category": 4, "evidence": ["D3:30"]},
    ]
    return {"sample_id": sample_id, "conversation": conv, "qa": qa}


def _data() -> list[Any]:
    return parse_locomo([_sample("s1"), _sample("s2", sessions=2, turns=12)])


def test_filler_is_inserted_and_original_turns_kept_in_order() -> None:
    clean = _data()
    noisy = make_chatlike(clean)
    assert len(noisy) == len(clean)
    for c, n in zip(clean, noisy, strict=True):
        assert [t for t in n.turns if not is_filler_id(t.dia_id)] == c.turns
        fillers = [t for t in n.turns if is_filler_id(t.dia_id)]
        # Some turns get a reply, not all (0.35 of 90 turns; far from 0 and from all).
        assert 0 < len(fillers) < len(c.turns)
        assert all(t.speaker == FILLER_SPEAKER and t.text in FILLER_REPLIES for t in fillers)
        assert n.questions == c.questions
    # The inputs are not modified.
    assert all(not is_filler_id(t.dia_id) for c in clean for t in c.turns)


def test_filler_is_never_evidence_and_ids_are_unique() -> None:
    noisy = make_chatlike(_data())
    for conv in noisy:
        ids = [t.dia_id for t in conv.turns]
        assert len(ids) == len(set(ids))
        cited = {e for q in conv.questions for e in q.evidence}
        assert not cited & {i for i in ids if is_filler_id(i)}
        # A filler id does not parse back into a valid evidence id of its own.
        for i in ids:
            if is_filler_id(i):
                assert parse_evidence([i])[0] != [i]


def test_filler_follows_its_turn_in_time_and_session() -> None:
    for conv in make_chatlike(_data()):
        for prev, cur in zip(conv.turns, conv.turns[1:], strict=False):
            assert prev.occurred_at < cur.occurred_at
            if is_filler_id(cur.dia_id):
                assert cur.dia_id.startswith(prev.dia_id)
                assert cur.session_index == prev.session_index


def test_deterministic_per_seed() -> None:
    a = make_chatlike(_data(), seed=0)
    b = make_chatlike(_data(), seed=0)
    c = make_chatlike(_data(), seed=1)
    assert a == b
    assert [t.dia_id for t in a[0].turns] != [t.dia_id for t in c[0].turns]


def test_filler_list_is_low_information() -> None:
    # Emoji-only, one-word and pleasantry replies are all represented.
    assert any(not any(ch.isalnum() for ch in r) for r in FILLER_REPLIES)
    assert "ok" in FILLER_REPLIES
    assert all(len(r) <= 40 for r in FILLER_REPLIES)


def test_run_locomo_chatlike_counts_filler(tmp_path: Path) -> None:
    pytest.importorskip("rank_bm25")
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample("s1", sessions=2, turns=12)]))
    clean = run_locomo(data, embedder="hashing", workdir=tmp_path, progress=False)
    noisy = run_locomo(data, embedder="hashing", chatlike=True, workdir=tmp_path, progress=False)
    assert noisy["chatlike"] is True and clean["chatlike"] is False
    assert noisy["turns"] > clean["turns"] == 24
    # Only the first question's evidence exists in two sessions.
    assert noisy["questions_scored"] == clean["questions_scored"] == 1
    assert set(noisy["filler_top3"]) == {"keyword", "vector", "hybrid", "bm25", "dense"}
    assert "filler_top3" not in clean
    # Per conversation too: with one conversation, its figures are the overall ones.
    for run in (clean, noisy):
        per = run["per_conversation"]["s1"]
        assert set(per) == set(run["systems"])
        for name, got in per.items():
            assert got["n"] == 1
            assert got["recall@10"] == run["systems"][name]["overall"]["recall@10"]
    assert "filler reply in the top 3" in format_locomo(noisy)
