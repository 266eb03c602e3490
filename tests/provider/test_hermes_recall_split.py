"""Through Hermes' real MemoryManager: the stable part of recall goes into the
system prompt, the per-turn part into prefetch, and off-topic turns get nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agent.memory_provider")

from agent.memory_manager import MemoryManager

from tests.hermes_support import config, hermes_home_fixture, provider_module  # noqa: F401

pytestmark = pytest.mark.hermes

FACTS = "My name is Ada. I adopted a greyhound called Pixel. Please always answer in French."


def manager(home: Path, session: str) -> tuple[MemoryManager, Any]:
    p = provider_module().MemstoreProvider(config())
    mm = MemoryManager()
    mm.add_provider(p)
    mm.initialize_all(session, platform="cli", hermes_home=str(home), agent_context="primary")
    return mm, p


def test_stable_context_in_the_system_prompt_per_turn_context_in_prefetch(
    hermes_home: Path,
) -> None:
    mm, p = manager(hermes_home, "s1")
    before = mm.build_system_prompt()
    assert "memstore_memory_search" in before and "<standing-instructions>\n" not in before
    p.sync_turn(FACTS, "Noté.", session_id="s1")
    p.on_session_end([])
    mm.shutdown_all()

    # A new session: the system prompt is rebuilt with what changed.
    mm, p = manager(hermes_home, "s2")
    system = mm.build_system_prompt()
    assert "<standing-instructions>\n- " in system and "French" in system
    assert mm.build_system_prompt() == system  # stable between turns

    per_turn = mm.prefetch_all("What is my greyhound called?")
    assert "Pixel" in per_turn
    # The instruction itself is not repeated (the message it came from is
    # shown: it says more than the instruction).
    assert "Instruction from the user" not in per_turn
    assert "<standing-instructions>" not in per_turn
    assert "<user-persona>" not in per_turn and "<scene-navigation>" not in per_turn

    for off_topic in ("What is the capital of Australia?", "Write a haiku about autumn."):
        assert mm.prefetch_all(off_topic) == "", off_topic
    mm.shutdown_all()
