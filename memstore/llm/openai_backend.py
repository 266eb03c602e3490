"""memstore's own backend: any OpenAI-compatible ``/chat/completions`` endpoint.

* Transport errors, rate limits and 5xx are retried by the ``openai`` client
  itself (``max_retries`` with exponential backoff and ``Retry-After``).
* The answer's body is read here, in chunks, and never past
  ``llm_max_answer_bytes``: a misbehaving server cannot make a worker hold an
  unbounded answer in memory. Past the cap the call fails with a clear error.
* A body that is cut off or is not JSON (a proxy dropping the connection, a
  server crashing mid-answer) is retried like a 5xx, ``llm_max_retries`` times;
  the ``openai`` client would let a raw ``JSONDecodeError`` escape instead.
* Every failure becomes :class:`~memstore.errors.LLMError` naming the endpoint
  and model, never the API key.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memstore.config import Settings
from memstore.errors import ConfigError, LLMError
from memstore.llm.backend import ChatAnswer, text_of, usage_of
from memstore.redact import install_log_redaction, redact, strip_credentials

if TYPE_CHECKING:
    import httpx
    import openai

# openai (and httpx) load when a backend is built: commands that never call a
# model, and the rule deriver, do not pay the ~1 s of CPU their import costs.

log = logging.getLogger("memstore.llm")

_MAX_DETAIL = 200
_CHUNK = 64 * 1024
_BACKOFF_S = 0.5
_MAX_BACKOFF_S = 8.0


class _BadBody(Exception):
    """The server answered 200 but the body is unusable: worth another try."""


class OpenAIBackend:
    """Chat over an OpenAI-compatible endpoint; safe to share across threads."""

    deriver = "llm"

    def __init__(self, settings: Settings) -> None:
        check_settings(settings)
        self._settings = settings
        # What messages, logs and status call the endpoint: never its credentials.
        self._base_url = strip_credentials(settings.llm.base_url)
        install_log_redaction()
        self._model = settings.llm.model
        self._api_key = settings.llm.api_key
        import openai

        # The openai client (and the httpx pool under it) is thread-safe, so one
        # instance serves every thread.
        self._client = openai.OpenAI(
            base_url=settings.llm.base_url,
            # Local servers (llama.cpp, Ollama, vLLM) need no key, but the client insists.
            api_key=settings.llm.api_key or "none",
            timeout=settings.llm.timeout_s,
            max_retries=settings.llm.max_retries,
        )
        self._lock = threading.Lock()
        # Off by default: llama.cpp, older vLLM and many proxies reject response_format.
        self._json_mode = settings.llm.json_mode

    @property
    def model(self) -> str:
        return self._model

    @property
    def base_url(self) -> str:
        return self._base_url

    def describe(self) -> str:
        return f"memstore's endpoint {self._base_url} (model {self._model})"

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"OpenAIBackend(base_url={self._base_url!r}, model={self._model!r})"

    def chat(self, kind: str, messages: Sequence[Mapping[str, str]]) -> ChatAnswer:
        attempts = 1 + max(self._settings.llm.max_retries, 0)
        for attempt in range(1, attempts + 1):
            try:
                return self._once(kind, messages)
            except _BadBody as exc:
                if attempt == attempts:
                    raise LLMError(
                        f"{self._where(kind)} sent an unusable answer {attempts} time(s): {exc}"
                    ) from exc
                delay = min(_BACKOFF_S * 2 ** (attempt - 1), _MAX_BACKOFF_S)
                log.info("llm %s: attempt %d: %s; retrying in %.1fs", kind, attempt, exc, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- one request ---------------------------------------------------------------

    def _once(self, kind: str, messages: Sequence[Mapping[str, str]]) -> ChatAnswer:
        import openai  # loaded by __init__ already

        with self._lock:
            json_mode = self._json_mode
        kwargs: dict[str, Any] = {
            "model": self._model,
            "messages": [dict(m) for m in messages],
            "temperature": self._settings.llm.temperature,
            "max_tokens": self._settings.llm.max_tokens,
        }
        if json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        try:
            with self._client.chat.completions.with_streaming_response.create(**kwargs) as resp:
                body = self._read_capped(kind, resp.http_response)
        except openai.BadRequestError as exc:
            if json_mode and "response_format" in str(exc):
                # The server rejects JSON mode: drop it for good and ask again;
                # the parser copes with free-form answers anyway.
                log.warning(
                    "llm %s: %s rejects response_format; disabling it", kind, self._base_url
                )
                with self._lock:
                    self._json_mode = False
                return self._once(kind, messages)
            raise self._translate(kind, exc) from exc
        except openai.OpenAIError as exc:
            raise self._translate(kind, exc) from exc
        return self._answer(kind, body)

    def _read_capped(self, kind: str, response: httpx.Response) -> bytes:
        import httpx  # loaded with openai already

        cap = self._settings.llm.max_answer_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise LLMError(
                f"{self._where(kind)} answered with {int(declared):,} bytes, more than "
                f"llm_max_answer_bytes ({cap:,}); not read"
            )
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in response.iter_bytes(_CHUNK):
                size += len(chunk)
                if size > cap:
                    raise LLMError(
                        f"{self._where(kind)} answered with more than llm_max_answer_bytes "
                        f"({cap:,} bytes); reading stopped there"
                    )
                chunks.append(chunk)
        except httpx.TimeoutException as exc:
            raise _BadBody(f"timed out reading the answer after {size:,} bytes") from exc
        except httpx.HTTPError as exc:
            raise _BadBody(
                f"the answer broke off after {size:,} bytes ({type(exc).__name__})"
            ) from exc
        return b"".join(chunks)

    def _answer(self, kind: str, body: bytes) -> ChatAnswer:
        try:
            data = json.loads(body)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise _BadBody(f"the answer is not complete JSON ({len(body):,} bytes: {exc})") from exc
        if not isinstance(data, dict):
            raise _BadBody(f"the answer is a JSON {type(data).__name__}, not an object")
        error = data.get("error")
        if error:
            # Some proxies report upstream failures with HTTP 200 and an error body.
            message = error.get("message") if isinstance(error, dict) else error
            raise LLMError(f"{self._where(kind)} answered with an error: {self._detail(message)}")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise LLMError(f"{self._where(kind)} answered with no choices")
        choice = choices[0]
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        model = data.get("model")
        finish = choice.get("finish_reason")
        return ChatAnswer(
            text=text_of(content),
            model=model if isinstance(model, str) and model else self._model,
            usage=usage_of(data.get("usage")),
            finish_reason=finish if isinstance(finish, str) else None,
        )

    # -- errors ----------------------------------------------------------------------

    def _where(self, kind: str) -> str:
        return f"LLM {kind}: {self._base_url} (model {self._model})"

    def _translate(self, kind: str, exc: openai.OpenAIError) -> LLMError:
        import openai  # loaded by __init__ already

        where = self._where(kind)
        retries = self._settings.llm.max_retries
        if isinstance(exc, openai.APITimeoutError):
            return LLMError(
                f"{where} timed out after {self._settings.llm.timeout_s:g}s ({retries} retries)"
            )
        if isinstance(exc, openai.APIConnectionError):
            return LLMError(f"{where} unreachable ({retries} retries): {self._detail(exc)}")
        if isinstance(exc, openai.APIStatusError):
            return LLMError(f"{where} answered HTTP {exc.status_code}: {self._detail(exc)}")
        return LLMError(f"{where} failed: {type(exc).__name__}: {self._detail(exc)}")

    def _detail(self, value: object) -> str:
        text = one_line(redact(str(value)))
        if self._api_key:
            # Some servers echo the key back in auth errors.
            text = text.replace(self._api_key, "***")
        return text


def check_settings(settings: Settings) -> None:
    given = {"llm_base_url": settings.llm.base_url, "llm_model": settings.llm.model}
    missing = [name for name, value in given.items() if not value.strip()]
    if missing:
        env = " and ".join("MEMSTORE_" + m.upper() for m in missing)
        raise ConfigError(f"LLM is not configured: set {' and '.join(missing)} (or {env})")
    if settings.llm.max_answer_bytes <= 0:
        raise ConfigError(
            f"llm_max_answer_bytes must be positive, got {settings.llm.max_answer_bytes}"
        )


def one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_DETAIL else flat[:_MAX_DETAIL] + "…"


__all__ = ["OpenAIBackend", "check_settings", "one_line"]
