"""The Hermes LLM adapter against hermes-agent's real auxiliary client (no AIAgent).

Hermes' model is the fake OpenAI server, named in config.yaml as `hermes model`
would write it; requests go through ``agent.auxiliary_client.call_llm``.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agent.auxiliary_client")

from memstore.hermes_provider.home import edit_config, section
from memstore.hermes_provider.stores import shared_stores

from memstore import Settings
from memstore.bench.fakeopenai import FakeOpenAI
from memstore.derive.events import L1Extracted
from memstore.errors import LLMError
from tests.derive_support import KINDS, ScriptedLLM
from tests.hermes_support import config, hermes_home_fixture, provider_module  # noqa: F401
from tests.provider.test_hermes_e2e import no_outbound  # noqa: F401

pytestmark = pytest.mark.hermes

hermes_llm = provider_module().hermes_llm
MemstoreProvider = provider_module().MemstoreProvider
MODEL = "hermes-main-model"


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        ({}, None),
        ({"model": {"context_length": 1000}}, None),
        ({"model": "gpt-x"}, ("auto", "gpt-x")),
        ({"model": {"default": "m1", "provider": "openrouter"}}, ("openrouter", "m1")),
        ({"model": {"provider": "nous"}}, ("nous", "")),
        (
            {"model": {"default": "m1", "provider": "openrouter"},
             "auxiliary": {"memstore_derive": {"model": "small"}}},
            ("openrouter", "small"),
        ),
        (
            {"model": {"default": "m1"},
             "auxiliary": {"memstore_derive": {"provider": "anthropic", "model": "auto"}}},
            ("anthropic", "m1"),
        ),
        ({"auxiliary": {"memstore_derive": {"base_url": "http://h/v1"}}}, ("custom", "")),
        ({"model": 42, "auxiliary": "junk"}, ("auto", "42")),
    ],
)  # fmt: skip
def test_configured_model(cfg: dict[str, Any], expected: tuple[str, str] | None) -> None:
    found = hermes_llm.configured_model(cfg)
    assert (None if found is None else (found.provider, found.model)) == expected


@pytest.fixture
def model() -> Iterator[tuple[FakeOpenAI, ScriptedLLM]]:
    scripted = ScriptedLLM()

    def route(request: dict[str, Any]) -> str:
        system = str((request.get("messages") or [{}])[0].get("content") or "")
        return scripted(request) if any(v in system for v in KINDS) else "Noted."

    with FakeOpenAI(chat=route) as fake:
        yield fake, scripted


def _hermes_model(home: Path, fake: FakeOpenAI) -> None:
    def mutate(data: Any) -> None:
        section(data, "model").update(default=MODEL, provider="custom", base_url=fake.base_url)

    edit_config(home, mutate)


def test_per_request_instances_share_the_store_and_its_model(
    hermes_home: Path, model: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    """api_server: a provider per request, dropped without shutdown; derivation
    still uses Hermes' model after the instance that registered it is gone."""
    fake, scripted = model
    _hermes_model(hermes_home, fake)
    first = MemstoreProvider(config(store_linger_s=60))
    first.initialize("api-1", hermes_home=str(hermes_home), platform="api_server")
    store = first.store
    user = first.user_id  # api_server without a session key: one memory per session
    first.sync_turn("Hi, my name is Alice.", "Noted.", session_id="api-1")
    del first
    gc.collect()  # its lease went back; the store lingers
    assert store.host_llm is not None

    second = MemstoreProvider(config(store_linger_s=60))
    second.initialize("api-1", hermes_home=str(hermes_home), platform="api_server")
    assert second.store is store
    assert second.user_id == user
    second.sync_turn("I live in Berlin.", "Noted.", session_id="api-1")
    del second
    gc.collect()
    # The session ends later, on a pipeline thread, with no provider instance alive.
    assert store.end_session(user, "api-1", timeout_s=30)
    events = store.read_events(types=[L1Extracted.TYPE])
    assert events and {(e.payload.deriver, e.payload.model) for e in events} == {  # type: ignore[attr-defined]
        ("hermes", MODEL)
    }
    assert scripted.calls.count("extract") >= 1
    contents = {m["content"] for m in store.list_memories(user)}
    assert {"The user's name is Alice.", "The user lives in Berlin."} <= contents
    shared_stores().close_all()


def test_no_model_anywhere_is_an_llm_error(hermes_home: Path, no_outbound: None) -> None:  # noqa: F811
    # Hermes raises RuntimeError when it resolves no provider (and whatever a
    # provider's SDK raises when it cannot connect): the adapter maps it.
    backend = hermes_llm.HermesBackend(Settings(), hermes_llm.HermesModel("nous", "x"))
    with pytest.raises(LLMError, match=r"via Hermes .*failed"):
        backend.chat("l1_extract", [{"role": "user", "content": "hi"}])


def test_an_answer_past_the_cap_is_refused(
    hermes_home: Path, model: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, _ = model
    _hermes_model(hermes_home, fake)
    fake.set_chat(lambda _req: "x" * 5000)
    backend = hermes_llm.HermesBackend(
        Settings().replace(llm_max_answer_bytes=1000), hermes_llm.HermesModel("custom", MODEL)
    )
    with pytest.raises(LLMError, match=r"5,000 characters, more than llm_max_answer_bytes"):
        backend.chat("l1_extract", [{"role": "user", "content": "hi"}])
    fake.set_chat(lambda _req: '{"ok": true}')
    answer = backend.chat("l1_extract", [{"role": "user", "content": "hi"}])
    assert (answer.text, answer.model) == ('{"ok": true}', MODEL)
    # Hermes' client resolved the model from its config.yaml (memstore only read it).
    assert fake.chat_requests()[-1]["model"] == MODEL
