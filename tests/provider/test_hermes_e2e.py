"""End to end: the real hermes-agent AIAgent, a fake model on 127.0.0.1, memstore installed.

Session 1: the user states facts; the session ends and extraction runs (the
offline rule-based deriver). Session 2, a new agent: the request Hermes sends
to the model carries the recalled facts inside <memory-context>, and the
model's call to memstore_memory_search is routed to memstore and answered.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("run_agent")

from memstore.hermes_provider.home import edit_config, section
from memstore.hermes_provider.install import install

from memstore.bench.fakeopenai import FakeOpenAI
from tests.hermes_support import hermes_home_fixture, provider_module  # noqa: F401

pytestmark = [pytest.mark.hermes, pytest.mark.slow]

FACTS = "My name is Ada. I love green tea. Please always answer in French."


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def fake_model(request: dict[str, Any]) -> str | dict[str, Any]:
    messages = request.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return "Voilà ce dont je me souviens : " + _text(last.get("content"))[:200]
    said = _text(last.get("content"))
    tools = {t["function"]["name"] for t in request.get("tools") or []}
    if said.startswith("Search your memory") and "memstore_memory_search" in tools:
        args = json.dumps({"query": "green tea", "limit": 3})
        return {
            "content": None,
            "tool_calls": [{"id": "call_1", "name": "memstore_memory_search", "arguments": args}],
        }
    return "Bien noté."


@pytest.fixture
def no_outbound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hermes must need nothing but the loopback model server."""
    original = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise OSError(f"test: outbound connection refused: {address}")
        return original(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(chat=fake_model) as fake:
        yield fake


def make_agent(fake: FakeOpenAI, session_id: str) -> Any:
    from run_agent import AIAgent

    return AIAgent(
        base_url=fake.base_url,
        api_key="x",
        model="fake",
        provider="custom",
        quiet_mode=True,
        skip_context_files=True,
        enabled_toolsets=["memory"],
        session_id=session_id,
    )


def user_message_sent(request: dict[str, Any]) -> str:
    users = [m for m in request["messages"] if m.get("role") == "user"]
    return _text(users[-1]["content"])


def test_hermes_remembers_across_sessions(
    hermes_home: Path, model: FakeOpenAI, no_outbound: None
) -> None:
    provider_module()  # importable as the shim imports it, installed or not
    install(hermes_home)

    def settings(data: Any) -> None:
        mem = section(section(data, "memory"), "memstore")
        mem["embedder"] = "hashing"
        mem["store_linger_s"] = 0
        section(data, "model")["context_length"] = 128000  # fewer model probes

    edit_config(hermes_home, settings)

    # -- session 1: the user states facts; ending the session extracts them ------
    agent = make_agent(model, "session-1")
    mm = agent._memory_manager
    assert mm is not None and mm.get_provider("memstore") is not None
    first = agent.run_conversation(FACTS)
    assert first["final_response"] == "Bien noté."
    assert mm.flush_pending(timeout=10)
    system = model.chat_requests()[0]["messages"][0]
    assert system["role"] == "system" and "memstore_memory_search" in _text(system["content"])
    agent.shutdown_memory_provider(first["messages"])  # on_session_end + shutdown
    agent.close()

    # -- session 2: a new agent recalls them ----------------------------------------
    seen = len(model.chat_requests())
    agent = make_agent(model, "session-2")
    second = agent.run_conversation(
        "Do you remember my name, which tea I love, and which language to answer in?"
    )
    request = model.chat_requests()[seen]
    sent = user_message_sent(request)
    assert "<memory-context>" in sent
    block = sent.split("<memory-context>", 1)[1].split("</memory-context>", 1)[0]
    system = _text(request["messages"][0]["content"])
    # The stable part (standing instructions) is in the system prompt, once;
    # the per-turn part (relevant memories) comes with the message.
    assert "<standing-instructions>\n- " in system and "french" in system.lower()
    assert "<standing-instructions>" not in block and "Instruction from the user" not in block
    assert "green tea" in block.lower(), block
    assert "ada" in (system + block).lower()

    # -- an off-topic question injects no memories; the system prompt is unchanged --
    seen = len(model.chat_requests())
    off = agent.run_conversation(
        "What is the capital of Australia?", conversation_history=second["messages"]
    )
    request = model.chat_requests()[seen]
    assert "<memory-context>" not in user_message_sent(request)
    assert _text(request["messages"][0]["content"]) == system  # prompt caching stays valid
    second = off

    # -- the model calls memstore_memory_search; Hermes routes it to memstore -----
    seen = len(model.chat_requests())
    third = agent.run_conversation(
        "Search your memory for my drinks.", conversation_history=second["messages"]
    )
    follow_up = model.chat_requests()[-1]["messages"]
    tool_messages = [m for m in follow_up if m.get("role") == "tool"]
    assert tool_messages, follow_up
    answer = json.loads(_text(tool_messages[-1]["content"]))
    assert answer["count"] >= 1
    assert any("green tea" in r["text"].lower() for r in answer["results"])
    assert {"id", "text", "type", "scene", "score", "time"} <= set(answer["results"][0])
    assert "green tea" in third["final_response"].lower()
    assert len(model.chat_requests()) > seen

    # The recalled block itself never became conversation memory.
    agent._memory_manager.flush_pending(timeout=10)
    p = agent._memory_manager.get_provider("memstore")
    said = p.store.search_conversations("default", "System note recalled", limit=20)
    assert all("<memory-context>" not in h.text for h in said)
    agent.shutdown_memory_provider(third["messages"])
    agent.close()


def test_extraction_by_an_llm_on_the_same_fake_server(
    hermes_home: Path, model: FakeOpenAI, no_outbound: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipeline's LLM calls go to the fake server too (a scripted extractor)."""
    from tests.derive_support import ScriptedLLM

    scripted = ScriptedLLM()

    def route(request: dict[str, Any]) -> str | dict[str, Any]:
        return scripted(request) if request.get("model") == "memstore-llm" else fake_model(request)

    model.set_chat(route)
    monkeypatch.setenv("MEMSTORE_LLM_API_KEY", "test-key")  # keys live in the environment
    install(hermes_home)

    def settings(data: Any) -> None:
        mem = section(section(data, "memory"), "memstore")
        mem.update(embedder="hashing", store_linger_s=0)
        mem.update(llm_base_url=model.base_url, llm_model="memstore-llm", llm_max_retries=0)
        section(data, "model")["context_length"] = 128000

    edit_config(hermes_home, settings)

    def hermes_requests() -> list[dict[str, Any]]:
        return [r for r in model.chat_requests() if r.get("model") != "memstore-llm"]

    agent = make_agent(model, "llm-1")
    first = agent.run_conversation(
        "My name is Alice and I live in Berlin. Please answer in English."
    )
    agent._memory_manager.flush_pending(timeout=10)
    agent.shutdown_memory_provider(first["messages"])
    agent.close()
    assert "extract" in scripted.calls  # extraction really asked the model

    seen = len(hermes_requests())
    agent = make_agent(model, "llm-2")
    agent.run_conversation("What is my name, do I live in Berlin, and do I want English?")
    sent = user_message_sent(hermes_requests()[seen])
    block = sent.split("<memory-context>", 1)[1].split("</memory-context>", 1)[0]
    for fact in ("alice", "berlin", "english"):
        assert fact in block.lower(), block
    agent.shutdown_memory_provider([])
    agent.close()
