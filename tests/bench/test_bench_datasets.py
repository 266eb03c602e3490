"""BEAM and LoCoMo-Plus read into the bench's shapes, from hand-made samples
in each data set's file format; the format guessed from the path."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memstore.bench.beam_data import load_beam
from memstore.bench.datasets import detect_dataset, load_bench_data
from memstore.bench.locomoplus_data import COGNITIVE, load_locomo_plus, parse_time_gap
from memstore.errors import InvalidInputError
from tests.bench.test_bench_cli import _sample
from tests.bench_data_support import beam_chat, beam_questions, write_beam, write_plus


def test_beam_batches_become_dated_sessions_without_the_plan_marker(tmp_path: Path) -> None:
    convs = load_beam(write_beam(tmp_path, (2, 1, 10)))
    assert [c.sample_id for c in convs] == ["beam-1", "beam-2", "beam-10"]
    conv = convs[0]
    assert (conv.speaker_a, conv.speaker_b) == ("User", "Assistant")
    assert [t.dia_id for t in conv.turns] == [f"M{i}" for i in range(8)]
    assert [t.session_index for t in conv.turns] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert [t.speaker for t in conv.turns[:2]] == ["User", "Assistant"]
    assert conv.turns[0].occurred_at == datetime(2024, 1, 10, tzinfo=UTC)
    assert conv.turns[3].occurred_at == datetime(2024, 1, 10, tzinfo=UTC) + timedelta(seconds=3)
    assert conv.turns[4].occurred_at == datetime(2024, 3, 5, tzinfo=UTC)
    assert conv.turns[0].text.endswith("due on February 2.")
    assert conv.turns[4].text == "I switched the sync job to tokio async tasks"
    assert "->->" not in " ".join(t.text for t in conv.turns)


def test_beam_questions_keep_their_type_evidence_and_gold(tmp_path: Path) -> None:
    conv = load_beam(write_beam(tmp_path, (1,)) / "1")[0]
    by_cat = {q.category: q for q in conv.questions}
    assert sorted(by_cat) == [1, 2, 4, 5, 9]
    assert by_cat[1].evidence == [] and by_cat[1].answer.startswith("The chat has no")
    assert by_cat[2].evidence == ["M2", "M4"]  # both sides of the contradiction
    assert by_cat[4].evidence == ["M0"] and by_cat[4].answer == "February 2"
    # No gold answer: the QA harness cannot grade instruction following.
    assert by_cat[5].evidence == ["M6"] and by_cat[5].answer == ""
    assert by_cat[9].evidence == ["M0", "M1", "M4"] and by_cat[9].skipped_evidence == ["M99"]


@pytest.mark.parametrize(
    ("chat", "questions", "message"),
    [
        ({"turns": []}, beam_questions(), "list of batches"),
        ([{"turns": [[{"role": "user", "id": 0, "content": "x"}]]}], {}, "no time anchor"),
        (
            [{"turns": [[{"role": "user", "id": 0, "content": "x", "time_anchor": "soon"}]]}],
            {},
            "time anchor",
        ),
        (beam_chat(), {"riddles": []}, "unknown BEAM question type"),
        (beam_chat(), {"abstention": [{"q": 1}]}, "'question'"),
    ],
)
def test_beam_bad_input_is_refused_clearly(
    tmp_path: Path, chat: object, questions: object, message: str
) -> None:
    d = tmp_path / "1"
    (d / "probing_questions").mkdir(parents=True)
    (d / "chat.json").write_text(json.dumps(chat))
    (d / "probing_questions" / "probing_questions.json").write_text(json.dumps(questions))
    with pytest.raises(InvalidInputError, match=message):
        load_beam(d)


def test_beam_without_questions_or_chats_is_refused(tmp_path: Path) -> None:
    root = write_beam(tmp_path, (1,))
    (root / "1" / "probing_questions" / "probing_questions.json").unlink()
    with pytest.raises(InvalidInputError, match="probing_questions"):
        load_beam(root)
    with pytest.raises(InvalidInputError, match="not a BEAM chat directory"):
        load_beam(tmp_path / "100K" / "1" / "probing_questions")


def test_time_gaps_read_as_the_dataset_reads_them() -> None:
    assert parse_time_gap("two weeks later") == timedelta(days=14)
    assert parse_time_gap("about three months later") == timedelta(days=90)
    assert parse_time_gap("one year later") == timedelta(days=365)
    assert parse_time_gap("6 weeks later") == timedelta(days=42)
    assert parse_time_gap("several months later") == timedelta(0)


def test_locomo_plus_cues_are_stitched_into_their_hosts(tmp_path: Path) -> None:
    convs = load_locomo_plus(write_plus(tmp_path / "plus"))
    # Item i goes to host i % 2: items 0 and 2 to the first, item 1 to the second.
    assert [c.sample_id for c in convs] == ["conv-host-0-plus", "conv-host-1-plus"]
    first, second = convs
    assert [q.question for q in first.questions] == [
        "My friends invited me to go bouldering on Saturday.",
        "Should I buy the new phone now?",
    ]
    assert {q.category for c in convs for q in c.questions} == {COGNITIVE}
    assert all(q.answer == "" for c in convs for q in c.questions)
    cue = [t for t in first.turns if t.dia_id in first.questions[0].evidence]
    assert [(t.speaker, t.text) for t in cue] == [
        ("Ana", "I sprained my ankle on the climbing wall."),
        ("Bo", "Ouch, rest it well."),
    ]
    last_host_turn = datetime(2023, 5, 20, 10, 0, 2, tzinfo=UTC)
    query_at = last_host_turn + timedelta(days=7)
    assert cue[0].occurred_at == query_at - timedelta(days=14)
    # B speaks first in item 2's cue: B is the host's second speaker.
    third = [t for t in first.turns if t.dia_id in first.questions[1].evidence]
    assert [t.speaker for t in third] == ["Bo", "Ana"]
    assert third[0].occurred_at == query_at  # "several months": no count, no gap
    # Sessions renumbered in time order; the host's own questions are left out.
    starts = {}
    for t in first.turns:
        starts.setdefault(t.session_index, t.occurred_at)
    assert sorted(starts) == [1, 2, 3, 4]
    assert [starts[n] for n in sorted(starts)] == sorted(starts.values())
    assert len(second.questions) == 1 and len(second.turns) == 6 + 1


def test_locomo_plus_needs_hosts_and_its_own_format(tmp_path: Path) -> None:
    root = write_plus(tmp_path / "plus")
    (root / "locomo10.json").unlink()
    with pytest.raises(InvalidInputError, match="host conversations"):
        load_locomo_plus(root)
    other = tmp_path / "hosts.json"
    other.write_text(json.dumps([_sample()]))
    assert len(load_locomo_plus(root / "locomo_plus.json", hosts=other)) == 1
    bad = tmp_path / "bad" / "locomo_plus.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps([{"cue_dialogue": "no speaker", "trigger_query": "A: hi"}]))
    with pytest.raises(InvalidInputError, match="strings"):
        load_locomo_plus(bad, hosts=other)
    bad.write_text(
        json.dumps([{"cue_dialogue": "no speaker", "trigger_query": "A: hi", "time_gap": "x"}])
    )
    with pytest.raises(InvalidInputError, match="at least one"):
        load_locomo_plus(bad, hosts=other)


def test_the_format_is_guessed_from_the_path(tmp_path: Path) -> None:
    beam = write_beam(tmp_path / "beam", (1,))
    plus = write_plus(tmp_path / "plus")
    assert detect_dataset(beam) == detect_dataset(beam / "1") == "beam"
    assert detect_dataset(plus) == detect_dataset(plus / "locomo_plus.json") == "locomo-plus"
    assert detect_dataset(plus / "locomo10.json") == "locomo"
    assert load_bench_data(beam).categories[7] == "multi_session_reasoning"
    assert load_bench_data(plus).categories == {COGNITIVE: "cognitive"}
    assert load_bench_data(plus / "locomo10.json").categories[1] == "multi-hop"
    with pytest.raises(InvalidInputError, match="a directory must hold"):
        detect_dataset(tmp_path)
    with pytest.raises(InvalidInputError, match="LoCoMo-Plus only"):
        load_bench_data(beam, hosts=plus / "locomo10.json")
    with pytest.raises(InvalidInputError, match="not a directory"):
        load_bench_data(beam, "locomo")
