"""LLMClient against the fake server through the real openai client."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from memstore.bench.fakeopenai import FakeOpenAI
from memstore.config import Settings
from memstore.errors import ConfigError, LLMError, LLMOutputError
from memstore.llm import LLMClient, LLMResult
from memstore.llm.jsonparse import parse_json_output

API_KEY = "sk-test-secret-4242"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def _settings(fake: FakeOpenAI, **kw: Any) -> Settings:
    values: dict[str, Any] = {
        "llm_base_url": fake.base_url,
        "llm_model": "test-model",
        "llm_api_key": API_KEY,
        "llm_timeout_s": 10.0,
        "llm_max_retries": 0,
        "llm_temperature": 0.2,
        "llm_max_tokens": 321,
    }
    values.update(kw)
    return Settings().replace(**values)


def _client(fake: FakeOpenAI, **kw: Any) -> LLMClient:
    return LLMClient.from_settings(_settings(fake, **kw))


def _as_dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise LLMOutputError(f"expected an object, got {type(value).__name__}")
    return value


def _memories(value: Any) -> list[str]:
    items = _as_dict(value)["memories"]
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise LLMOutputError("'memories' must be a list of strings")
    return items


def _ask(client: LLMClient, validate: Any = _as_dict, user: str = "hello") -> LLMResult[Any]:
    return client.complete_json(kind="test", system="Answer in JSON.", user=user, validate=validate)


def _sequence(*answers: str | dict[str, Any]) -> Any:
    """A chat handler giving these answers in turn (the last one repeats)."""
    lock = threading.Lock()
    calls = [0]

    def handler(_req: dict[str, Any]) -> str | dict[str, Any]:
        with lock:
            i = min(calls[0], len(answers) - 1)
            calls[0] += 1
        return answers[i]

    return handler


def test_normal_json(fake: FakeOpenAI) -> None:
    fake.set_chat(lambda _req: '{"memories": ["likes tea"]}')
    result = _ask(_client(fake), validate=_memories)
    assert result.value == ["likes tea"]
    assert result.attempts == 1
    assert result.model == "test-model"
    assert result.raw == '{"memories": ["likes tea"]}'
    assert result.usage is not None and result.usage["total_tokens"] > 0
    (req,) = fake.chat_requests()
    assert req["model"] == "test-model"
    assert req["temperature"] == 0.2
    assert req["max_tokens"] == 321
    assert not req.get("stream")
    assert "response_format" not in req
    assert req["messages"] == [
        {"role": "system", "content": "Answer in JSON."},
        {"role": "user", "content": "hello"},
    ]


def test_result_is_frozen(fake: FakeOpenAI) -> None:
    fake.set_chat(lambda _req: "[1, 2]")
    result = _ask(_client(fake), validate=lambda v: v)
    assert result.value == [1, 2]
    with pytest.raises(AttributeError):
        result.value = []  # type: ignore[misc]


def test_plain_prose_answer_is_never_accepted(fake: FakeOpenAI) -> None:
    # The fake's default answer is "ok": not JSON, even with an accept-all validator.
    with pytest.raises(LLMOutputError):
        _ask(_client(fake), validate=lambda v: v)


def test_fenced_json_with_prose(fake: FakeOpenAI) -> None:
    fake.set_chat(
        lambda _req: 'Here you go!\n```json\n{"memories": ["a", "b"],}\n```\nAnything else?'
    )
    result = _ask(_client(fake), validate=_memories)
    assert result.value == ["a", "b"]
    assert result.attempts == 1
    assert result.raw.startswith("Here you go!")


def test_malformed_then_good_on_corrective_retry(fake: FakeOpenAI) -> None:
    fake.set_chat(_sequence("I think the user likes tea.", '{"memories": ["likes tea"]}'))
    result = _ask(_client(fake), validate=_memories)
    assert result.value == ["likes tea"]
    assert result.attempts == 2
    first, second = fake.chat_requests()
    assert len(first["messages"]) == 2
    msgs = second["messages"]
    assert msgs[:2] == first["messages"]
    assert msgs[2] == {"role": "assistant", "content": "I think the user likes tea."}
    assert msgs[3]["role"] == "user"
    assert "no JSON object or array found" in msgs[3]["content"]
    # Usage adds up over both attempts.
    assert result.usage is not None
    assert result.usage["completion_tokens"] >= 6


def test_malformed_twice_raises(fake: FakeOpenAI) -> None:
    fake.set_chat(_sequence("nope", "still {not json}"))
    with pytest.raises(LLMOutputError) as info:
        _ask(_client(fake))
    assert info.value.raw == "still {not json}"
    assert "after 2 attempts" in str(info.value)
    assert "test-model" in str(info.value)
    assert isinstance(info.value.__cause__, LLMOutputError)
    assert len(fake.chat_requests()) == 2


def test_validation_failure_raises_after_retry(fake: FakeOpenAI) -> None:
    fake.set_chat(lambda _req: '{"memories": "not a list"}')
    with pytest.raises(LLMOutputError, match="must be a list of strings") as info:
        _ask(_client(fake), validate=_memories)
    assert info.value.raw == '{"memories": "not a list"}'
    second = fake.chat_requests()[1]
    assert "must be a list of strings" in second["messages"][-1]["content"]


def test_validation_failure_then_fixed(fake: FakeOpenAI) -> None:
    fake.set_chat(_sequence('{"memory": ["x"]}', '{"memories": ["x"]}'))
    result = _ask(_client(fake), validate=_memories)
    assert result.value == ["x"] and result.attempts == 2
    # A KeyError from a sloppy validator counts as a bad shape, not a crash.
    assert "KeyError" in fake.chat_requests()[1]["messages"][-1]["content"]


def test_truncated_answer_hint(fake: FakeOpenAI) -> None:
    fake.set_chat(_sequence({"content": '{"memories": ["a", ', "finish_reason": "length"}, "{}"))
    result = _ask(_client(fake))
    assert result.value == {} and result.attempts == 2
    assert "max_tokens" in fake.chat_requests()[1]["messages"][-1]["content"]


def test_empty_content_counts_as_bad_answer(fake: FakeOpenAI) -> None:
    fake.set_chat(
        _sequence(
            {"content": None, "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
            '{"ok": true}',
        )
    )
    result = _ask(_client(fake))
    assert result.value == {"ok": True} and result.attempts == 2
    # No empty assistant turn is sent back: some servers reject those.
    assert [m["role"] for m in fake.chat_requests()[1]["messages"]] == ["system", "user", "user"]


def test_500_then_success_is_retried_by_openai_client(fake: FakeOpenAI) -> None:
    fake.set_chat(lambda _req: '{"a": 1}')
    fake.fail_next(500)
    result = _ask(_client(fake, llm_max_retries=1))
    assert result.value == {"a": 1}
    assert result.attempts == 1  # transport retries are not answer attempts
    assert len(fake.chat_requests()) == 2


def test_429_then_success(fake: FakeOpenAI) -> None:
    fake.set_chat(lambda _req: '{"a": 2}')
    fake.fail_next(429, retry_after=0.05)
    result = _ask(_client(fake, llm_max_retries=2))
    assert result.value == {"a": 2}
    assert len(fake.chat_requests()) == 2


def test_persistent_500_becomes_llm_error_without_key(fake: FakeOpenAI) -> None:
    fake.fail_next(500, n=5, message=f"upstream exploded, key was {API_KEY}")
    client = _client(fake)
    with pytest.raises(LLMError) as info:
        _ask(client)
    err = info.value
    assert not isinstance(err, LLMOutputError)
    assert isinstance(err.__cause__, openai.APIStatusError)
    text = str(err)
    assert "HTTP 500" in text and fake.base_url in text and "test-model" in text
    assert API_KEY not in text
    assert "\n" not in text
    assert API_KEY not in repr(client)


def test_timeout_becomes_llm_error(fake: FakeOpenAI) -> None:
    fake.delay_next(3.0)
    with pytest.raises(LLMError, match="timed out") as info:
        _ask(_client(fake, llm_timeout_s=0.3, llm_max_retries=0))
    assert not isinstance(info.value, LLMOutputError)
    assert isinstance(info.value.__cause__, openai.APITimeoutError)
    assert fake.base_url in str(info.value)


def test_connection_refused_becomes_llm_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = Settings().replace(
        llm_base_url=f"http://127.0.0.1:{port}/v1", llm_model="m", llm_max_retries=0
    )
    with pytest.raises(LLMError, match="unreachable") as info:
        _ask(LLMClient(settings))
    assert isinstance(info.value.__cause__, openai.APIConnectionError)


def test_auth_error_translated(fake: FakeOpenAI) -> None:
    fake.fail_next(401, message="Incorrect API key provided")
    with pytest.raises(LLMError, match="HTTP 401"):
        _ask(_client(fake))


@pytest.mark.parametrize(
    "changes",
    [{"llm_base_url": ""}, {"llm_model": ""}, {"llm_base_url": "", "llm_model": "  "}],
)
def test_from_settings_requires_url_and_model(changes: dict[str, str]) -> None:
    settings = (
        Settings().replace(llm_base_url="http://127.0.0.1:1/v1", llm_model="m").replace(**changes)
    )
    with pytest.raises(ConfigError, match="not configured"):
        LLMClient.from_settings(settings)


def test_empty_api_key_is_allowed(fake: FakeOpenAI) -> None:
    fake.set_chat(lambda _req: "{}")
    client = _client(fake, llm_api_key="")
    assert client.model == "test-model"
    assert _ask(client).value == {}


def test_json_mode_opt_in(fake: FakeOpenAI) -> None:
    fake.set_chat(lambda _req: "{}")
    client = LLMClient(_settings(fake).replace(llm_json_mode=True))
    _ask(client)
    assert fake.chat_requests()[0]["response_format"] == {"type": "json_object"}


def test_json_mode_rejected_falls_back_for_good(fake: FakeOpenAI) -> None:
    fake.set_chat(lambda _req: "{}")
    fake.fail_next(400, message="response_format is not supported by this server")
    client = LLMClient(_settings(fake).replace(llm_json_mode=True))
    assert _ask(client).value == {}
    assert _ask(client).value == {}
    reqs = fake.chat_requests()
    assert len(reqs) == 3
    assert "response_format" in reqs[0]
    assert "response_format" not in reqs[1] and "response_format" not in reqs[2]


def test_other_400_is_not_swallowed(fake: FakeOpenAI) -> None:
    fake.fail_next(400, message="context length exceeded")
    with pytest.raises(LLMError, match="HTTP 400"):
        _ask(_client(fake))


def test_thread_safe_concurrent_calls(fake: FakeOpenAI) -> None:
    def echo(req: dict[str, Any]) -> str:
        return json.dumps({"echo": req["messages"][-1]["content"]})

    fake.set_chat(echo)
    client = _client(fake)
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(5):
                res = _ask(client, user=f"t{i}-{j}")
                results[i * 100 + j] = res.value["echo"]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert results == {i * 100 + j: f"t{i}-{j}" for i in range(8) for j in range(5)}


def test_close_and_context_manager(fake: FakeOpenAI) -> None:
    fake.set_chat(lambda _req: '{"k": [1]}')
    with _client(fake) as client:
        assert client.base_url == fake.base_url
        dumped = _ask(client, validate=json.dumps).value
        assert parse_json_output(dumped) == {"k": [1]}
