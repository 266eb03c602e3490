"""memstore behind Hermes' real api_server: ``hermes gateway run`` in a child process.

memstore is installed the documented way (``memstore hermes install``) into a
temporary Hermes home; the model is the fake OpenAI server on loopback, so
what Hermes sends the model (the ``<memory-context>`` block, the tool results)
is visible here. Each caller sends its own ``X-Hermes-Session-Key``.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("gateway.platforms.api_server")
pytest.importorskip("aiohttp")

from memstore.bench.fakeopenai import FakeOpenAI
from memstore.bench.hermes_server import ApiServer, Reply, prepare_home
from tests.derive_support import KINDS, ScriptedLLM, between, json_lines
from tests.hermes_support import installed

pytestmark = [pytest.mark.hermes, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MEMSTORE_CONFIG = {"embedder": "hashing", "extract_every": 1}
COLD_CALLERS = 6
CAPTURE_WAIT_S = 60.0

FACTS = {
    "alice": "I live in Lisbon and my favourite tea is genmaicha.",
    "bob": "I live in Reykjavik and my favourite tea is rooibos.",
}
SECRETS = {"alice": ("lisbon", "genmaicha"), "bob": ("reykjavik", "rooibos")}
TAG = re.compile(r"\[(?P<caller>[a-z0-9-]+)/(?P<n>\d+)\]")


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _extract_every_user_line(user: str) -> str:
    # Hermes' model also derives memstore's memories (no memstore LLM is set):
    # each user message becomes one memory, in the prompt's own JSON shape.
    msgs = json_lines(between(user, "NEW MESSAGES", "Ids you may cite"))
    found = [
        {"content": m["text"], "type": "persona", "priority": 50, "scene_name": "life",
         "source_message_ids": [m["id"]]}
        for m in msgs
        if m["role"] == "user" and "live" in m["text"]
    ]  # fmt: skip
    return json.dumps({"memories": found})


_DERIVER = ScriptedLLM()
_DERIVER.override["extract"] = _extract_every_user_line


def fake_model(request: dict[str, Any]) -> str | dict[str, Any]:
    """Answers "Noted."; "Search your memory for X" calls memstore's search tool;
    memstore's derivation prompts get scripted JSON answers."""
    messages = request.get("messages") or []
    system = _text(messages[0].get("content")) if messages else ""
    if any(version in system for version in KINDS):
        return _DERIVER(request)
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return "Found: " + _text(last.get("content"))[:500]
    said = _text(last.get("content"))
    tools = {t["function"]["name"] for t in request.get("tools") or []}
    asked = re.search(r"Search your memory for (.+?)\.", said)
    if asked and "memstore_memory_search" in tools:
        args = json.dumps({"query": asked.group(1), "limit": 5})
        return {
            "content": None,
            "tool_calls": [{"id": "call_1", "name": "memstore_memory_search", "arguments": args}],
        }
    return "Noted."


@dataclass
class Harness:
    server: ApiServer
    model: FakeOpenAI
    cold: list[Reply] = field(default_factory=list)
    counter: Counter[str] = field(default_factory=Counter)

    def say(self, caller: str, text: str, session: str) -> Reply:
        """Send ``text`` tagged with the caller and a request number."""
        self.counter[caller] += 1
        tagged = f"{text} [{caller}/{self.counter[caller]}]"
        reply = self.server.chat(tagged, session_id=session, session_key=caller)
        assert reply.status == 200, (reply.status, reply.body)
        return reply

    def requests_of(self, caller: str) -> list[dict[str, Any]]:
        """Every model request made while serving ``caller`` (by the tag in it).

        memstore's own derivation requests are left out: they are not what the
        agent is shown, and their prompt's worked examples name a city."""
        out = []
        for r in self.model.chat_requests():
            first = (r.get("messages") or [{}])[0]
            if any(version in _text(first.get("content")) for version in KINDS):
                continue
            users = [
                _text(m.get("content")) for m in r.get("messages") or [] if m["role"] == "user"
            ]
            tags = {m.group("caller") for u in users[-1:] for m in TAG.finditer(u)}
            if tags == {caller}:
                out.append(r)
        return out


def memory_context(request: dict[str, Any]) -> str:
    users = [m for m in request["messages"] if m.get("role") == "user"]
    sent = _text(users[-1]["content"]) if users else ""
    if "<memory-context>" not in sent:
        return ""
    return sent.split("<memory-context>", 1)[1].split("</memory-context>", 1)[0]


def wait_for(check: Any, timeout_s: float = CAPTURE_WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.25)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    if not installed(ROOT):
        pytest.skip("memstore is not installed in this Python (pip install -e .)")
    home = tmp_path_factory.mktemp("hermes-api") / "home"
    with FakeOpenAI(chat=fake_model) as model:
        prepare_home(home, model.base_url, memstore=True, memstore_config=MEMSTORE_CONFIG)
        server = ApiServer(home)
        try:
            server.start()
            harness = Harness(server, model)
            # A cold server: nobody has loaded the provider yet when these arrive together.
            with ThreadPoolExecutor(COLD_CALLERS) as pool:
                harness.cold = list(
                    pool.map(
                        lambda i: server.chat(
                            f"Hello, cold start {i}.",
                            session_id=f"cold-{i}",
                            session_key=f"cold{i}",
                        ),
                        range(COLD_CALLERS),
                    )
                )
            yield harness
        finally:
            server.stop()


def test_a_cold_server_loads_the_provider_for_concurrent_requests(api: Harness) -> None:
    assert [r.status for r in api.cold] == [200] * COLD_CALLERS
    assert "no provider instance found" not in api.server.log()
    captured = wait_for(
        lambda: (
            len({s for s, _ in api.server.memstore_user_messages() if s.startswith("cold-")})
            == COLD_CALLERS
        )
    )
    assert captured, api.server.memstore_user_messages()
    users = api.server.memstore_users()
    assert {users[f"cold-{i}"] for i in range(COLD_CALLERS)} == {
        f"api_server:key:cold{i}" for i in range(COLD_CALLERS)
    }


def test_two_callers_never_see_each_others_facts(api: Harness) -> None:
    api.say("alice", FACTS["alice"], "alice-1")
    api.say("bob", FACTS["bob"], "bob-1")  # Bob's very first turn
    # Each caller's own facts come back in a new conversation (recall works, so
    # the absence of the other's facts below means something).
    for caller in ("alice", "bob"):

        def recalled(caller: str = caller) -> bool:
            api.say(caller, "Where do I live and which tea do I like?", f"{caller}-2")
            block = memory_context(api.requests_of(caller)[-1]).lower()
            return all(word in block for word in SECRETS[caller])

        assert wait_for(recalled, 45), api.requests_of(caller)[-1]["messages"][-1]
        api.say(caller, "Search your memory for where I live.", f"{caller}-3")
        tool_results = [
            _text(m.get("content"))
            for r in api.requests_of(caller)
            for m in r["messages"]
            if m.get("role") == "tool"
        ]
        assert any(SECRETS[caller][0] in t.lower() for t in tool_results), tool_results
    for caller, other in (("alice", "bob"), ("bob", "alice")):
        seen = json.dumps(api.requests_of(caller)).lower()
        for word in SECRETS[other]:
            assert word not in seen, f"{caller} was shown {other}'s {word!r}"
    users = api.server.memstore_users()
    assert users["alice-1"] == users["alice-2"] == "api_server:key:alice"
    assert users["bob-1"] == users["bob-2"] == "api_server:key:bob"


def test_concurrent_requests_in_one_session_are_captured_exactly_once(api: Harness) -> None:
    n = 12
    texts = [f"Burst message number {i}." for i in range(n - 2)] + ["Same words."] * 2
    with ThreadPoolExecutor(n) as pool:
        replies = list(
            pool.map(lambda t: api.server.chat(t, session_id="burst", session_key="carol"), texts)
        )
    assert [r.status for r in replies] == [200] * n

    def hermes() -> Counter[str]:
        return Counter(t for _, t in api.server.hermes_user_messages("burst"))

    def ours() -> Counter[str]:
        return Counter(t for _, t in api.server.memstore_user_messages("burst"))

    assert wait_for(lambda: sum(hermes().values()) == n)
    assert hermes() == Counter(texts)  # what Hermes acknowledged and stored
    assert wait_for(lambda: ours() == hermes()), (ours(), hermes())
    time.sleep(1.0)  # and nothing arrives twice afterwards
    assert ours() == hermes()


def test_no_threads_or_descriptors_leak(api: Harness) -> None:
    def burst(first: int) -> None:
        def one(i: int) -> int:
            return api.server.chat(
                f"leak check {i}", session_id=f"leak-{i % 5}", session_key=f"leaker{i % 5}"
            ).status

        with ThreadPoolExecutor(5) as pool:
            assert set(pool.map(one, range(first, first + 10))) == {200}

    burst(0)  # warm: every session and caller seen once
    assert wait_for(lambda: len(api.server.memstore_user_messages()) >= 10)
    time.sleep(2.0)
    threads, fds = api.server.threads(), api.server.fds()
    burst(100)
    burst(200)
    assert wait_for(
        lambda: (
            sum(1 for s, _ in api.server.memstore_user_messages() if s.startswith("leak-")) == 30
        )
    )
    time.sleep(2.0)
    assert api.server.threads() <= threads + 2, (threads, api.server.threads())
    assert api.server.fds() <= fds + 4, (fds, api.server.fds())


def test_sigterm_stops_cleanly(tmp_path: Path) -> None:
    if not installed(ROOT):
        pytest.skip("memstore is not installed in this Python (pip install -e .)")
    with FakeOpenAI(chat=fake_model) as model:
        home = tmp_path / "home"
        prepare_home(home, model.base_url, memstore=True, memstore_config=MEMSTORE_CONFIG)
        server = ApiServer(home)
        try:
            server.start()
            assert server.chat("I like cocoa.", session_id="t-1", session_key="dora").status == 200
            assert wait_for(lambda: server.memstore_user_messages("t-1"))
        finally:
            code = server.stop()
    # Hermes exits 1 after a signal on purpose (so systemd restarts it); a kill would be -9.
    assert code == 1
    assert server.stop_seconds is not None and server.stop_seconds < 30
    log = server.log()
    # No traceback, and nothing logged by memstore's loggers at WARNING or above
    # (paths may contain "memstore": Hermes logs its parent's command line).
    assert "Traceback" not in log, log[-3000:]
    assert not re.search(r"^(?:WARNING|ERROR|CRITICAL) memstore\b", log, re.M), log[-3000:]
