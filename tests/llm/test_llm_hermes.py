"""Derivation with Hermes' own model, in the real hermes-agent.

Hermes' model is the fake OpenAI server (config.yaml ``model:``); memstore has
no ``llm_*`` of its own. A session runs through AIAgent and ends; extraction
must go through Hermes' auxiliary client to that model (memstore never learns
its name or URL except from Hermes), and the events, ``hermes memory status``
and ``memstore doctor`` must name the deriver and model that did it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("run_agent")

from memstore.hermes_provider.home import edit_config, section
from memstore.hermes_provider.install import install
from memstore.hermes_provider.stores import shared_stores

from memstore import Settings
from memstore.bench.fakeopenai import FakeOpenAI
from memstore.derive.events import L1Extracted
from memstore.derive.memories.extract import EXTRACT_PROMPT_VERSION
from memstore.store import Store
from tests.derive_support import KINDS, ScriptedLLM
from tests.hermes_support import hermes_home_fixture, provider_module  # noqa: F401
from tests.provider.test_hermes_e2e import fake_model, make_agent, no_outbound  # noqa: F401

pytestmark = [pytest.mark.hermes, pytest.mark.slow]

HERMES_MODEL = "hermes-main-model"
SAID = "Hi, my name is Alice. I live in Berlin."


def _is_memstore_prompt(request: dict[str, Any]) -> bool:
    messages = request.get("messages") or [{}]
    system = str(messages[0].get("content") or "")
    return any(version in system for version in KINDS)


@pytest.fixture
def server() -> Iterator[tuple[FakeOpenAI, ScriptedLLM]]:
    scripted = ScriptedLLM()

    def route(request: dict[str, Any]) -> str | dict[str, Any]:
        return scripted(request) if _is_memstore_prompt(request) else fake_model(request)

    with FakeOpenAI(chat=route) as fake:
        yield fake, scripted


def _configure(home: Path, fake: FakeOpenAI, *, hermes_model: bool, **memstore: Any) -> None:
    install(home)

    def settings(data: Any) -> None:
        mem = section(section(data, "memory"), "memstore")
        mem.update(embedder="hashing", store_linger_s=0, **memstore)
        model = section(data, "model")
        model["context_length"] = 128000  # fewer model probes
        if hermes_model:  # what `hermes model` writes for a custom endpoint
            model.update(default=HERMES_MODEL, provider="custom", base_url=fake.base_url)

    edit_config(home, settings)


@pytest.fixture
def reopen(hermes_home: Path) -> Iterator[list[Store]]:
    opened: list[Store] = []
    yield opened
    for store in opened:
        store.close()


def _one_session(fake: FakeOpenAI, reopen: list[Store]) -> Store:
    agent = make_agent(fake, "derive-1")
    result = agent.run_conversation(SAID)
    assert agent._memory_manager.flush_pending(timeout=10)
    db = agent._memory_manager.get_provider("memstore").store.path
    agent.shutdown_memory_provider(result["messages"])  # on_session_end: extraction runs
    agent.close()
    shared_stores().close_all()
    # What the session left in the file, read without Hermes or an LLM.
    store = Store.open(db, settings=Settings().replace(embedder="hashing", scheduler=False))
    reopen.append(store)
    return store


def _derivation_requests(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [r for r in fake.chat_requests() if _is_memstore_prompt(r)]


def test_hermes_model_derives_when_memstore_has_no_llm(
    hermes_home: Path,
    server: tuple[FakeOpenAI, ScriptedLLM],
    no_outbound: None,  # noqa: F811
    reopen: list[Store],
) -> None:
    fake, scripted = server
    _configure(hermes_home, fake, hermes_model=True)
    store = _one_session(fake, reopen)

    assert "extract" in scripted.calls  # memstore's extraction prompt reached the model
    asked = _derivation_requests(fake)
    # The model name exists only in Hermes' config: Hermes' client resolved it.
    assert asked and {r["model"] for r in asked} == {HERMES_MODEL}
    assert EXTRACT_PROMPT_VERSION in asked[0]["messages"][0]["content"]
    contents = {m["content"] for m in store.list_memories("default")}
    assert {"The user's name is Alice.", "The user lives in Berlin."} <= contents
    [event] = store.read_events(types=[L1Extracted.TYPE])
    assert event.payload.deriver == "hermes"  # type: ignore[attr-defined]
    assert event.payload.model == HERMES_MODEL  # type: ignore[attr-defined]
    assert event.payload.usage["total_tokens"] > 0  # type: ignore[attr-defined]

    # `hermes memory status` names the deriver configured and the one that ran.
    status = provider_module().MemstoreProvider().get_status_config({})
    assert status["derivation"].startswith("hermes: Hermes' model")
    assert HERMES_MODEL in status["derivation"]
    assert status["last derivation"].startswith(f"hermes, model {HERMES_MODEL} (l1, ")

    # `memstore doctor` reads the same from the database.
    report = _doctor(Path(status["database"]))
    assert report["llm"].startswith("rules:")  # the CLI itself has no LLM ...
    assert report["last_derivation"].startswith(f"hermes, model {HERMES_MODEL} (l1, ")


def test_memstore_endpoint_wins_over_hermes_model(
    hermes_home: Path,
    server: tuple[FakeOpenAI, ScriptedLLM],
    no_outbound: None,  # noqa: F811
    reopen: list[Store],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, scripted = server
    monkeypatch.setenv("MEMSTORE_LLM_API_KEY", "test-key")
    _configure(
        hermes_home,
        fake,
        hermes_model=True,
        llm_base_url=fake.base_url,
        llm_model="memstore-llm",
        llm_max_retries=0,
    )
    store = _one_session(fake, reopen)
    assert "extract" in scripted.calls
    assert {r["model"] for r in _derivation_requests(fake)} == {"memstore-llm"}
    [event] = store.read_events(types=[L1Extracted.TYPE])
    assert (event.payload.deriver, event.payload.model) == ("llm", "memstore-llm")  # type: ignore[attr-defined]
    status = provider_module().MemstoreProvider().get_status_config({})
    assert status["derivation"].startswith("llm: memstore's endpoint")


def test_rules_when_hermes_has_no_model_configured(
    hermes_home: Path,
    server: tuple[FakeOpenAI, ScriptedLLM],
    no_outbound: None,  # noqa: F811
    reopen: list[Store],
) -> None:
    fake, scripted = server
    _configure(hermes_home, fake, hermes_model=False)  # the agent gets its model in code
    store = _one_session(fake, reopen)
    assert scripted.calls == [] and _derivation_requests(fake) == []
    [event] = store.read_events(types=[L1Extracted.TYPE])
    assert (event.payload.deriver, event.payload.model) == ("rules", "rules")  # type: ignore[attr-defined]
    status = provider_module().MemstoreProvider().get_status_config({})
    assert status["derivation"].startswith("rules:")


def test_a_failing_hermes_model_fails_the_run_and_loses_nothing(
    hermes_home: Path,
    server: tuple[FakeOpenAI, ScriptedLLM],
    no_outbound: None,  # noqa: F811
    reopen: list[Store],
) -> None:
    fake, scripted = server
    _configure(hermes_home, fake, hermes_model=True)
    scripted.override["extract"] = '{"memories": [{"fact": "Alice", "kind": "persona"}]}'
    store = _one_session(fake, reopen)
    assert store.read_events(types=[L1Extracted.TYPE]) == []
    failed = [e.payload for e in store.read_events(types=["pipeline.run_failed"])]
    assert failed and "via Hermes" in failed[0].error  # type: ignore[attr-defined]
    assert store.list_memories("default") == []


def _doctor(db: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "memstore", "doctor", "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MEMSTORE_EMBEDDER": "hashing"},
    )
    report: dict[str, Any] = json.loads(out.stdout)
    return report
