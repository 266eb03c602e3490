"""``memstore_scene_read`` through hermes-agent 0.19.0's real MemoryManager.

Scenes come from the real pipeline with the offline rule deriver: a captured
turn, the session's extraction, then ``run_pipeline`` for the scene step.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agent.memory_provider")

from agent.memory_manager import MemoryManager

from tests.hermes_support import config, hermes_home_fixture, provider_module  # noqa: F401

pytestmark = pytest.mark.hermes

MemstoreProvider = provider_module().MemstoreProvider
SCENE_READ = "memstore_scene_read"


def manager(home: Path, session: str, user: str) -> tuple[MemoryManager, Any]:
    # No background timers: a timer's drain running at the same moment would
    # take the scene step this test runs itself with run_pipeline.
    p = MemstoreProvider(config(scheduler=False))
    mm = MemoryManager()
    mm.add_provider(p)
    mm.initialize_all(session, platform="cli", hermes_home=str(home), user_id=user)
    return mm, p


def say_and_derive(p: Any, user: str, session: str, text: str) -> None:
    p.sync_turn(text, "Noted.", session_id=session)
    p.on_session_end([])
    p.store.run_pipeline(user)


def read(mm: MemoryManager, **args: Any) -> dict[str, Any]:
    out = mm.handle_tool_call(SCENE_READ, args)
    assert isinstance(out, str)
    result: dict[str, Any] = json.loads(out)
    return result


def navigation_names(p: Any, user: str) -> list[str]:
    """Scene names exactly as the scene navigation shows them to the model (the
    text recall injects; read directly, so a recall timeout cannot drop it)."""
    text = p.store.scene_navigation(user)
    return [line[2:].split(" (heat ")[0] for line in text.splitlines()]


def test_schema_is_listed_and_routed() -> None:
    p = MemstoreProvider()
    schema = next(s for s in p.get_tool_schemas() if s["name"] == SCENE_READ)
    assert schema["parameters"]["required"] == ["scene_name"]
    assert schema["parameters"]["properties"]["scene_name"]["type"] == "string"
    mm = MemoryManager()
    mm.add_provider(p)
    assert mm.has_tool(SCENE_READ)
    assert SCENE_READ in {s["name"] for s in mm.get_all_tool_schemas()}


def test_reads_a_scene_the_pipeline_derived(hermes_home: Path) -> None:
    mm, p = manager(hermes_home, "s1", "alice")
    say_and_derive(p, "alice", "s1", "I love green tea. I work as a nurse at the city hospital.")
    names = navigation_names(p, "alice")
    assert len(names) >= 2
    stored = {s["name"]: s for s in p.store.list_scenes("alice")}
    assert set(names) == set(stored)

    for name in names:
        got = read(mm, scene_name=name)
        assert "error" not in got, got
        scene = got["scene"]
        want = stored[name]
        assert (scene["name"], scene["summary"], scene["body"], scene["heat"]) == (
            want["name"],
            want["summary"],
            want["body"],
            want["heat"],
        )
        assert scene["memory_count"] == len(want["memory_ids"])
        datetime.fromisoformat(scene["updated_at"])  # a real timestamp, not a position
    tea_scene = next(n for n in names if "green tea" in stored[n]["body"])
    # A model retyping the name in another case still gets the scene.
    assert read(mm, scene_name=f"  {tea_scene.upper()} ")["scene"]["name"] == tea_scene

    # A later session changes the scene: the tool shows the new body and time.
    before = read(mm, scene_name=tea_scene)["scene"]
    say_and_derive(p, "alice", "s2", "I also love jasmine tea.")
    after = read(mm, scene_name=tea_scene)["scene"]
    assert "jasmine" in after["body"] and "jasmine" not in before["body"]
    assert after["updated_at"] > before["updated_at"]
    assert after["memory_count"] == before["memory_count"] + 1
    mm.shutdown_all()


def test_unknown_or_bad_scene_names_give_json_errors(hermes_home: Path) -> None:
    mm, p = manager(hermes_home, "s1", "alice")
    empty = read(mm, scene_name="Work")
    assert "error" in empty and empty["available"] == []

    say_and_derive(p, "alice", "s1", "I love green tea. I work as a nurse at the city hospital.")
    names = navigation_names(p, "alice")
    unknown = read(mm, scene_name="Astronomy")
    assert "Astronomy" in unknown["error"]
    assert unknown["available"] == names  # hottest first, as in the navigation
    for args in ({}, {"scene_name": "   "}, {"scene_name": 7}, {"scene_name": None}):
        out = p.handle_tool_call(SCENE_READ, args)
        assert "error" in json.loads(out), (args, out)
    mm.shutdown_all()


def test_one_user_never_reads_another_users_scene(hermes_home: Path) -> None:
    mm_a, a = manager(hermes_home, "sa", "alice")
    mm_b, b = manager(hermes_home, "sb", "bob")
    say_and_derive(a, "alice", "sa", "I love green tea. I work as a nurse at the city hospital.")
    say_and_derive(b, "bob", "sb", "I love black coffee.")
    alice_names = set(navigation_names(a, "alice"))
    bob_names = set(navigation_names(b, "bob"))
    assert alice_names - bob_names, (alice_names, bob_names)  # a scene only Alice has

    for name in alice_names:
        got = read(mm_b, scene_name=name)
        if name in bob_names:  # same name, Bob's own block
            assert "tea" not in got["scene"]["body"] and "nurse" not in got["scene"]["body"]
        else:
            assert "error" in got and set(got["available"]) == bob_names
    for name in bob_names:
        body = read(mm_a, scene_name=name).get("scene", {}).get("body", "")
        assert "coffee" not in body
    mm_a.shutdown_all()
    mm_b.shutdown_all()
