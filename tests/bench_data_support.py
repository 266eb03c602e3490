"""Hand-made samples in BEAM's and LoCoMo-Plus's file formats (invented text;
the real data is never bundled), written where a test wants them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.bench.test_bench_cli import _sample


def beam_chat() -> list[dict[str, Any]]:
    # Two batches, as chat.json has them: lists of message groups, one
    # message per batch carrying the date, user messages ending in the marker.
    return [
        {
            "batch_number": 1,
            "time_anchor": None,
            "turns": [
                [
                    {
                        "role": "user",
                        "id": 0,
                        "time_anchor": "January-10-2024",
                        "index": "1,1",
                        "question_type": "main_question",
                        "content": "I'm building a birdwatching log app in Rust, "
                        "the first release is due on February 2. ->-> 1,1",
                    },
                    {
                        "role": "assistant",
                        "id": 1,
                        "content": "Great, let's plan the storage layer with SQLite first.",
                    },
                ],
                [
                    {
                        "role": "user",
                        "id": 2,
                        "index": "1,2",
                        "question_type": "main_question",
                        "content": "I never use async code in this project. ->-> 1,2",
                    },
                    {"role": "assistant", "id": 3, "content": "Understood, all synchronous."},
                ],
            ],
        },
        {
            "batch_number": 2,
            "time_anchor": None,
            "turns": [
                [
                    {
                        "role": "user",
                        "id": 4,
                        "time_anchor": "March-05-2024",
                        "index": "2,1",
                        "question_type": "main_question",
                        "content": "I switched the sync job to tokio async tasks ->->  2,1",
                    },
                    {"role": "assistant", "id": 5, "content": "Tokio is a fine choice."},
                    {
                        "role": "user",
                        "id": 6,
                        "question_type": "followup_question",
                        "content": "Please always answer with numbered steps.",
                    },
                    {"role": "assistant", "id": 7, "content": "1. Will do."},
                ]
            ],
        },
    ]


def beam_questions() -> dict[str, list[dict[str, Any]]]:
    return {
        "abstention": [
            {
                "question": "Which bird species did my beta testers log most?",
                "ideal_response": "The chat has no information about that.",
                "rubric": ["no information"],
            }
        ],
        "contradiction_resolution": [
            {
                "question": "Do I use async code in the app?",
                "ideal_answer": "You said you never use async, but later moved to tokio tasks.",
                "source_chat_ids": {"first_statement": [2], "second_statement": [4]},
            }
        ],
        "information_extraction": [
            {
                "question": "When is the first release of my birdwatching app due?",
                "answer": "February 2",
                "source_chat_ids": [0],
            }
        ],
        "instruction_following": [
            {
                "question": "How do I add a species table?",
                "expected_compliance": "Answer in numbered steps.",
                "source_chat_ids": [[6]],
            }
        ],
        "summarization": [
            {
                "question": "Summarise the app's progress.",
                "ideal_summary": "A Rust birdwatching log with SQLite storage, later tokio.",
                "source_chat_ids": [0, 1, 4, 99],
            }
        ],
    }


def write_beam(root: Path, numbers: tuple[int, ...] = (1, 2)) -> Path:
    """``root/100K/<n>/…`` for each number, as BEAM's repository lays it out."""
    for n in numbers:
        d = root / "100K" / str(n)
        (d / "probing_questions").mkdir(parents=True)
        (d / "chat.json").write_text(json.dumps(beam_chat()))
        (d / "probing_questions" / "probing_questions.json").write_text(
            json.dumps(beam_questions())
        )
    return root / "100K"


def plus_items() -> list[dict[str, Any]]:
    return [
        {
            "relation_type": "causal",
            "cue_dialogue": "A: I sprained my ankle on the climbing wall.\nB: Ouch, rest it well.",
            "trigger_query": "A: My friends invited me to go bouldering on Saturday.",
            "time_gap": "two weeks later",
            "model_name": "invented",
            "scores": {"combined": 0.5},
            "ranks": {"combined": 1},
            "final_similarity_score": 0.5,
        },
        {
            "relation_type": "value",
            "cue_dialogue": "A: I stopped eating meat for good this year.",
            "trigger_query": "A: Any ideas for the barbecue menu?",
            "time_gap": "about three months later",
        },
        {
            "relation_type": "goal",
            "cue_dialogue": "B: I'm saving every cent for a trip to Japan.\nA: Good luck!",
            "trigger_query": "B: Should I buy the new phone now?",
            "time_gap": "several months later",
        },
    ]


def write_plus(root: Path, hosts: int = 2) -> Path:
    """``locomo_plus.json`` and a ``locomo10.json`` of ``hosts`` conversations."""
    root.mkdir(parents=True, exist_ok=True)
    convs = []
    for n in range(hosts):
        s = _sample()
        s["sample_id"] = f"conv-host-{n}"
        convs.append(s)
    (root / "locomo10.json").write_text(json.dumps(convs))
    (root / "locomo_plus.json").write_text(json.dumps(plus_items()))
    return root
