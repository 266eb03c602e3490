"""The fake server must look like OpenAI to the real ``openai`` client."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from memstore.bench.fakeopenai import FakeOpenAI, fake_embedding


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def _client(fake: FakeOpenAI, **kw: Any) -> openai.OpenAI:
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout", 10.0)
    return openai.OpenAI(base_url=fake.base_url, api_key="test-key", **kw)


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_base_url_and_default_chat(fake: FakeOpenAI) -> None:
    assert fake.base_url.startswith("http://127.0.0.1:")
    assert fake.base_url.endswith("/v1")
    resp = _client(fake).chat.completions.create(
        model="m1", messages=[{"role": "user", "content": "hello there"}]
    )
    assert resp.choices[0].message.content == "ok"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.model == "m1"
    assert resp.usage is not None and resp.usage.prompt_tokens == 2
    assert fake.chat_requests()[0]["messages"][0]["content"] == "hello there"
    assert fake.requests[0]["path"] == "/v1/chat/completions"


def test_custom_handler_sees_request(fake: FakeOpenAI) -> None:
    seen: list[dict[str, Any]] = []

    def handler(req: dict[str, Any]) -> str:
        seen.append(req)
        return "echo: " + str(req["messages"][-1]["content"])

    fake.set_chat(handler)
    resp = _client(fake).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "ping"}], temperature=0.0, max_tokens=5
    )
    assert resp.choices[0].message.content == "echo: ping"
    assert seen[0]["temperature"] == 0.0 and seen[0]["max_tokens"] == 5


def test_stream_content(fake: FakeOpenAI) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 3
    fake.set_chat(lambda _req: text)
    stream = _client(fake).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "go"}], stream=True
    )
    parts: list[str] = []
    finish = None
    usage = None
    n_chunks = 0
    for chunk in stream:
        n_chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                parts.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    assert "".join(parts) == text
    assert n_chunks > 3
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens > 0


def test_stream_include_usage_trailing_chunk(fake: FakeOpenAI) -> None:
    stream = _client(fake).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "go"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-2].choices[0].finish_reason == "stop"


def _tool_answer(_req: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": None,
        "tool_calls": [
            {"id": "call_1", "name": "memory_search", "arguments": json.dumps({"q": "cats"})},
            {"id": "call_2", "name": "other", "arguments": "{}"},
        ],
    }


def test_tool_calls_non_stream(fake: FakeOpenAI) -> None:
    fake.set_chat(_tool_answer)
    resp = _client(fake).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "find"}]
    )
    msg = resp.choices[0].message
    assert resp.choices[0].finish_reason == "tool_calls"
    assert msg.content is None
    assert msg.tool_calls is not None and len(msg.tool_calls) == 2
    call = msg.tool_calls[0]
    assert call.id == "call_1"
    assert call.function.name == "memory_search"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"q": "cats"}  # type: ignore[union-attr]


def test_tool_calls_stream(fake: FakeOpenAI) -> None:
    fake.set_chat(_tool_answer)
    stream = _client(fake).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "find"}], stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                if tc.id:
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    slot["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
            if choice.finish_reason:
                finish = choice.finish_reason
    assert finish == "tool_calls"
    assert calls[0]["id"] == "call_1" and calls[0]["name"] == "memory_search"
    assert json.loads(calls[0]["arguments"]) == {"q": "cats"}
    assert calls[1]["name"] == "other" and json.loads(calls[1]["arguments"]) == {}


def test_embeddings_base64_default_and_float() -> None:
    with FakeOpenAI(embed_dim=32) as fake:
        client = _client(fake)
        texts = ["the cat sat on the mat", "the cat sat on a mat", "quarterly tax report"]
        # The openai client asks for base64 by default and decodes it itself.
        b64 = client.embeddings.create(model="e", input=texts)
        flt = client.embeddings.create(model="e", input=texts, encoding_format="float")
        assert fake.embedding_requests()[0]["encoding_format"] == "base64"
        assert fake.embedding_requests()[1]["encoding_format"] == "float"
        vecs_b64 = [list(d.embedding) for d in b64.data]
        vecs_flt = [list(d.embedding) for d in flt.data]
        assert [d.index for d in b64.data] == [0, 1, 2]
        for a, b in zip(vecs_b64, vecs_flt, strict=True):
            assert len(a) == len(b) == 32
            assert math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-5)
            assert all(math.isclose(x, y, abs_tol=1e-6) for x, y in zip(a, b, strict=True))
        assert vecs_flt[0] == pytest.approx(fake_embedding(texts[0], 32))
        # Similar texts are closer than unrelated ones.
        assert _cosine(vecs_flt[0], vecs_flt[1]) > _cosine(vecs_flt[0], vecs_flt[2])


def test_embeddings_single_string_dimensions_and_determinism(fake: FakeOpenAI) -> None:
    client = _client(fake)
    one = client.embeddings.create(model="e", input="hello world", dimensions=16)
    two = client.embeddings.create(model="e", input="hello world", dimensions=16)
    assert len(one.data) == 1 and len(one.data[0].embedding) == 16
    assert one.data[0].embedding == two.data[0].embedding
    empty = client.embeddings.create(model="e", input="", encoding_format="float")
    assert len(empty.data[0].embedding) == 64
    assert math.isclose(sum(x * x for x in empty.data[0].embedding), 1.0, rel_tol=1e-9)


def test_models_and_unknown_routes(fake: FakeOpenAI) -> None:
    models = _client(fake).models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    root = fake.base_url.removesuffix("/v1")
    req = urllib.request.Request(
        root + "/api/show", data=b'{"name": "x"}', headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 404
    assert "error" in json.loads(info.value.read())
    assert fake.requests[-1] == {"path": "/api/show", "json": {"name": "x"}}


def test_fail_next_status_and_count(fake: FakeOpenAI) -> None:
    client = _client(fake)
    fake.fail_next(500, n=2)
    for _ in range(2):
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(model="m", messages=[])
        assert info.value.status_code == 500
    assert client.chat.completions.create(model="m", messages=[]).choices[0].message.content == "ok"
    fake.fail_next(429)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="m", messages=[])


def test_fail_next_other_path_and_client_retry(fake: FakeOpenAI) -> None:
    fake.fail_next(503, path="/v1/embeddings", retry_after=0.01)
    # Chat is unaffected by an embeddings failure.
    _client(fake).chat.completions.create(model="m", messages=[])
    # The client retries the 503 (honouring retry-after-ms) and then succeeds.
    resp = _client(fake, max_retries=1).embeddings.create(model="e", input="x")
    assert len(resp.data) == 1
    assert len(fake.embedding_requests()) == 2


def test_delay_next_triggers_client_timeout(fake: FakeOpenAI) -> None:
    fake.delay_next(3.0)
    client = _client(fake, timeout=0.3)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=[])
    # Only one request was delayed; the next goes straight through.
    assert client.chat.completions.create(model="m", messages=[]).choices[0].message.content == "ok"


def test_handler_exception_is_500(fake: FakeOpenAI) -> None:
    def boom(_req: dict[str, Any]) -> str:
        raise RuntimeError("handler bug")

    fake.set_chat(boom)
    with pytest.raises(openai.InternalServerError, match="handler bug"):
        _client(fake).chat.completions.create(model="m", messages=[])


def test_stop_is_idempotent_and_restartable() -> None:
    fake = FakeOpenAI()
    fake.stop()  # never started: no-op
    fake.start()
    fake.delay_next(30.0)
    client = _client(fake, timeout=0.2)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=[])
    fake.stop()  # must not wait for the sleeping handler
    fake.stop()
    fake.start()
    try:
        assert _client(fake).models.list().data
    finally:
        fake.stop()
