"""Counts read as English: "1 memory", "2 memories"."""

from __future__ import annotations

from memstore.cli.table import plural
from memstore.derive.scenes.rules import scene_text


def test_scene_summary_counts_in_the_right_number() -> None:
    one, _ = scene_text("Home", [{"id": 1, "content": "The user lives in Lisbon.",
                                  "priority": 80}])  # fmt: skip
    assert one.startswith("1 memory: ")
    two, _ = scene_text("Home", [
        {"id": 1, "content": "The user lives in Lisbon.", "priority": 80},
        {"id": 2, "content": "The user has a garden.", "priority": 70},
    ])  # fmt: skip
    assert two.startswith("2 memories: ")


def test_plural() -> None:
    assert plural(1, "message") == "1 message"
    assert plural(0, "message") == "0 messages"
    assert plural(3, "memory", "memories") == "3 memories"
