"""The provider through hermes-agent 0.19.0's real MemoryManager (no AIAgent, no model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agent.memory_provider")

from agent.memory_manager import MemoryManager
from memstore.hermes_provider.stores import shared_stores

from tests.hermes_support import config, hermes_home_fixture, memory_texts, provider_module  # noqa: F401

pytestmark = pytest.mark.hermes

MemstoreProvider = provider_module().MemstoreProvider
TOOLS = {
    "memstore_memory_search",
    "memstore_conversation_search",
    "memstore_memory_forget",
    "memstore_scene_read",
}

FACTS = "My name is Ada. I love green tea. Please always answer in French."


def manager(home: Path, session: str = "s1", **kwargs: Any) -> tuple[MemoryManager, Any]:
    p = MemstoreProvider(config())
    mm = MemoryManager()
    mm.add_provider(p)
    mm.initialize_all(session, platform="cli", hermes_home=str(home), **kwargs)
    return mm, p


def tool(mm: MemoryManager, name: str, **args: Any) -> dict[str, Any]:
    out = mm.handle_tool_call(name, args)
    assert isinstance(out, str)
    result: dict[str, Any] = json.loads(out)
    return result


def test_schemas_before_initialize() -> None:
    p = MemstoreProvider()
    names = {s["name"] for s in p.get_tool_schemas()}
    assert names == TOOLS
    mm = MemoryManager()
    mm.add_provider(p)  # Hermes builds its routing table from these, before initialize
    assert all(mm.has_tool(n) for n in TOOLS)
    for s in p.get_tool_schemas():
        assert s["parameters"]["type"] == "object" and s["parameters"]["required"]


def test_full_turn_through_the_manager(hermes_home: Path) -> None:
    mm, p = manager(hermes_home, agent_context="primary")
    assert "memstore_memory_search" in mm.build_system_prompt()
    assert mm.prefetch_all("hello") == ""  # nothing known yet, and no error

    hits = tool(mm, "memstore_memory_search", query="tea")
    assert hits == {"results": [], "count": 0}
    messages = [
        {
            "role": "user",
            "content": FACTS,
            "api_content": FACTS + "\n\n<memory-context>x</memory-context>",
        },
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "content": '{"results": []}', "tool_call_id": "c1"},
        {"role": "assistant", "content": "Enchantée, Ada !"},
    ]
    mm.sync_all(FACTS, "Enchantée, Ada !", session_id="s1", messages=messages)
    mm.queue_prefetch_all("tea", session_id="s1")
    assert mm.flush_pending(timeout=10)

    said = tool(mm, "memstore_conversation_search", query="green tea", session="current")
    top = said["results"][0]
    assert top["role"] == "user" and "green tea" in top["text"]
    assert top["session"] == "s1" and top["time"]
    # Only the turn's text: no tool traffic, no recalled block.
    everything = tool(mm, "memstore_conversation_search", query="results Enchantée", limit=20)
    assert {r["role"] for r in everything["results"]} <= {"user", "assistant"}

    mm.on_session_end(messages)  # extraction runs now, bounded
    found = tool(mm, "memstore_memory_search", query="green tea")
    assert any("green tea" in r["text"] for r in found["results"]), found
    first = found["results"][0]
    assert set(first) >= {"id", "text", "type", "scene", "score", "time"}
    assert "green tea" in mm.prefetch_all("Which tea do I love?")

    mm.shutdown_all()
    assert p.store is None
    p.shutdown()  # idempotent


def test_bad_tool_arguments_give_json_errors(hermes_home: Path) -> None:
    mm, p = manager(hermes_home)
    cases: list[tuple[str, Any]] = [
        ("memstore_memory_search", {}),
        ("memstore_memory_search", {"query": "   "}),
        ("memstore_memory_search", {"query": "tea", "limit": "abc"}),
        ("memstore_memory_search", {"query": "tea", "limit": True}),
        ("memstore_memory_search", {"query": "tea", "type": "nonsense"}),
        ("memstore_memory_search", {"query": 42}),
        ("memstore_conversation_search", {"limit": 3}),
        ("memstore_memory_forget", {}),
        ("memstore_memory_forget", {"memory_id": "no-such-memory"}),
        ("memstore_nope", {"query": "x"}),
        ("memstore_memory_search", ["not", "a", "dict"]),
    ]
    for name, args in cases:
        out = p.handle_tool_call(name, args)  # the provider itself, not Hermes' wrapper
        assert "error" in json.loads(out), (name, args, out)
    # Lenient where it is harmless: numeric strings and out-of-range limits.
    assert "error" not in tool(mm, "memstore_memory_search", query="tea", limit="7")
    assert "error" not in tool(mm, "memstore_memory_search", query="tea", limit=500)
    assert "error" not in tool(mm, "memstore_conversation_search", query="tea", limit=None)
    # Through Hermes an unknown tool is Hermes' own JSON error.
    assert "error" in tool(mm, "memstore_nope")


def test_second_instance_sees_the_first_ones_data(hermes_home: Path) -> None:
    mm1, p1 = manager(hermes_home, "s1")
    p1.sync_turn(FACTS, "Noted.", session_id="s1")
    p1.on_session_end([])
    # Hermes' api_server: a brand-new instance per request, on the same store.
    mm2, p2 = manager(hermes_home, "s2")
    assert p2.store is p1.store
    assert "green tea" in mm2.prefetch_all("Do you remember which tea I love?")
    said = tool(mm2, "memstore_conversation_search", query="green tea")
    assert said["results"][0]["session"] == "s1"
    mm1.shutdown_all()
    mm2.shutdown_all()


def test_users_never_see_each_other(hermes_home: Path) -> None:
    mm_a, a = manager(hermes_home, "sa", user_id="alice")
    mm_b, b = manager(hermes_home, "sb", user_id="bob")
    a.sync_turn("I love green tea.", "Noted.", session_id="sa")
    a.on_session_end([])
    b.sync_turn("I love black coffee.", "Noted.", session_id="sb")
    b.on_session_end([])
    assert "coffee" not in mm_a.prefetch_all("tea or coffee?")
    assert "tea" not in mm_b.prefetch_all("tea or coffee?").lower()
    # Hybrid search always ranks something: Bob's own, never Alice's.
    said = tool(mm_b, "memstore_conversation_search", query="green tea", limit=20)["results"]
    assert all(r["session"] == "sb" and "tea" not in r["text"] for r in said)
    found = tool(mm_b, "memstore_memory_search", query="green tea", limit=20)["results"]
    assert all("tea" not in r["text"] for r in found)
    alice_memory = tool(mm_a, "memstore_memory_search", query="green tea")["results"][0]["id"]
    # Bob cannot forget Alice's memory by id.
    assert "error" in tool(mm_b, "memstore_memory_forget", memory_id=alice_memory)
    assert tool(mm_a, "memstore_memory_search", query="green tea")["results"]


def test_forget_tool(hermes_home: Path) -> None:
    mm, p = manager(hermes_home)
    p.sync_turn("I love green tea.", "Noted.", session_id="s1")
    p.on_session_end([])
    mid = tool(mm, "memstore_memory_search", query="green tea")["results"][0]["id"]
    assert tool(mm, "memstore_memory_forget", memory_id=mid) == {"forgotten": mid}
    assert mid not in {r["id"] for r in tool(mm, "memstore_memory_search", query="tea")["results"]}


def test_read_only_contexts_never_write(hermes_home: Path) -> None:
    mm, p = manager(hermes_home, "sub", agent_context="subagent")
    assert p.read_only
    p.sync_turn("I love green tea.", "Noted.", session_id="sub")
    p.on_memory_write("add", "user", "Ada likes oolong")
    p.on_delegation("look up tea", "found tea")
    p.on_session_end([])
    assert "error" in tool(mm, "memstore_memory_forget", memory_id="m1")
    assert not tool(mm, "memstore_conversation_search", query="tea")["results"]
    assert not tool(mm, "memstore_memory_search", query="oolong")["results"]
    assert p.store is not None and p.store.event_count() == 0


def test_memory_context_blocks_are_not_captured(hermes_home: Path) -> None:
    mm, p = manager(hermes_home)
    injected = (
        "What is new?\n\n<memory-context>\n[System note: recalled]\nSECRET-RECALL\n"
        "</memory-context>"
    )
    p.sync_turn(injected, "Nothing much.", session_id="s1")
    said = tool(mm, "memstore_conversation_search", query="What is new", limit=20)
    assert said["results"] and all("SECRET-RECALL" not in r["text"] for r in said["results"])
    leaked = tool(mm, "memstore_conversation_search", query="SECRET-RECALL", limit=20)
    assert all("SECRET-RECALL" not in r["text"] for r in leaked["results"])


def test_identical_turns_are_both_captured(hermes_home: Path) -> None:
    mm, p = manager(hermes_home)
    history: list[dict[str, Any]] = []
    for _ in range(2):
        history += [{"role": "user", "content": "yes"}, {"role": "assistant", "content": "ok"}]
        p.sync_turn("yes", "ok", session_id="s1", messages=list(history))
    p.sync_turn("yes", "ok", session_id="s1", messages=list(history))  # a retried sync
    said = tool(mm, "memstore_conversation_search", query="yes", limit=20)
    assert len([r for r in said["results"] if r["role"] == "user"]) == 2


def test_built_in_memory_writes_are_mirrored(hermes_home: Path) -> None:
    mm, _ = manager(hermes_home)
    meta = {"write_origin": "assistant_tool", "session_id": "s1", "tool_name": "memory"}
    mm.on_memory_write("add", "user", "Ada drinks oolong tea every morning", metadata=meta)
    assert "oolong" in " ".join(
        memory_texts(mm.handle_tool_call("memstore_memory_search", {"query": "oolong"}))
    )
    replace_meta = {**meta, "old_text": "Ada drinks oolong tea every morning"}
    mm.on_memory_write(
        "replace", "user", "Ada drinks jasmine tea every morning", metadata=replace_meta
    )
    texts = memory_texts(mm.handle_tool_call("memstore_memory_search", {"query": "tea morning"}))
    assert any("jasmine" in t for t in texts) and not any("oolong" in t for t in texts)
    mm.on_memory_write("remove", "user", "Ada drinks jasmine tea every morning", metadata=meta)
    texts = memory_texts(mm.handle_tool_call("memstore_memory_search", {"query": "jasmine"}))
    assert not any("jasmine" in t for t in texts)


def test_session_switch_pre_compress_and_delegation(hermes_home: Path) -> None:
    mm, p = manager(hermes_home, "old")
    p.sync_turn(FACTS, "Noted.", session_id="old")
    summary = mm.on_pre_compress([{"role": "user", "content": "Which tea do I love?"}])
    assert "green tea" in summary and len(summary) < 2000
    mm.on_session_switch("new", parent_session_id="old", reset=True, reason="new_session")
    assert p.session_id == "new"
    mm.on_delegation("find a tea shop", "Found Tea House on 5th street", child_session_id="c1")
    said = tool(mm, "memstore_conversation_search", query="Tea House", session="current")
    assert said["results"] and said["results"][0]["session"] == "new"


def test_config_schema_save_and_backup(hermes_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (hermes_home / "config.yaml").write_text(
        "# keep this comment\nmodel:\n  default: fake  # and this one\n", encoding="utf-8"
    )
    p = MemstoreProvider()
    keys = {f["key"] for f in p.get_config_schema()}
    assert {"db_path", "llm_base_url", "llm_model", "llm_api_key", "extract_every"} <= keys
    secrets = [f for f in p.get_config_schema() if f.get("secret")]
    assert secrets and all(f["env_var"].startswith("MEMSTORE_") for f in secrets)
    # Inside the Hermes home `hermes backup` snapshots *.db itself (SQLite backup API).
    assert p.backup_paths() == []  # before initialize too

    outside = hermes_home.parent / "elsewhere" / "x.db"
    p.save_config({"db_path": str(outside), "extract_every": "3"}, str(hermes_home))
    text = (hermes_home / "config.yaml").read_text(encoding="utf-8")
    assert "# keep this comment" in text and "# and this one" in text and "default: fake" in text
    assert "extract_every" in text and str(outside) in text
    assert MemstoreProvider().backup_paths() == [str(outside)]
    env_db = hermes_home.parent / "env" / "env.db"
    monkeypatch.setenv("MEMSTORE_DB", str(env_db))
    assert MemstoreProvider().backup_paths() == [str(env_db)]


def test_is_available_never_raises(hermes_home: Path) -> None:
    assert MemstoreProvider().is_available()
    (hermes_home / "config.yaml").write_text(
        "memory: [this, is, not, a mapping\n", encoding="utf-8"
    )
    assert MemstoreProvider().is_available() is False
    (hermes_home / "config.yaml").write_text(
        "memory:\n  memstore:\n    llm_api_key: sk-in-the-config\n", encoding="utf-8"
    )
    assert MemstoreProvider().is_available() is False  # secrets belong in the environment
    blocker = hermes_home / "a-file"
    blocker.write_text("x")
    assert MemstoreProvider({"db_path": str(blocker / "sub" / "m.db")}).is_available() is False
    # Not available means initialize leaves the provider inert, not broken.
    p = MemstoreProvider({"db_path": str(blocker / "sub" / "m.db"), "embedder": "hashing"})
    (hermes_home / "config.yaml").write_text("", encoding="utf-8")
    p.initialize("s1", hermes_home=str(hermes_home))
    assert p.store is None and p.prefetch("tea") == ""
    assert "error" in json.loads(p.handle_tool_call("memstore_memory_search", {"query": "x"}))
    p.sync_turn("a", "b")
    p.shutdown()


def test_shutdown_releases_the_shared_store(hermes_home: Path) -> None:
    mm1, _ = manager(hermes_home, "s1")
    mm2, p2 = manager(hermes_home, "s2")
    db = hermes_home / "memstore.db"
    assert shared_stores().refs(db) == 2
    mm1.shutdown_all()
    assert shared_stores().refs(db) == 1 and p2.store is not None
    mm2.shutdown_all()
    assert shared_stores().refs(db) == 0 and db.resolve() not in shared_stores().open_paths()
