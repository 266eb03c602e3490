"""A thin, thread-safe JSON-answer client over any OpenAI-compatible endpoint.

Derivation (L1 extraction, dedup, scenes, persona) only ever needs "send a
system and a user prompt, get back a validated JSON value". This module does
exactly that and nothing else:

* transport errors, rate limits and 5xx are retried by the ``openai`` client
  itself (``max_retries`` with exponential backoff and ``Retry-After``); we do
  not stack a second retry loop on top of it;
* an answer that does not parse or validate gets ONE corrective round trip
  quoting the error, because models usually fix their JSON when told what
  was wrong, and a second failure rarely recovers on a third try;
* every ``openai`` exception becomes :class:`~memstore.errors.LLMError`
  naming the endpoint and model (never the API key), so callers only catch
  memstore errors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import openai

from memstore.config import Settings
from memstore.errors import ConfigError, LLMError, LLMOutputError
from memstore.llm.jsonparse import parse_json_output

log = logging.getLogger("memstore.llm")

T = TypeVar("T")

_MAX_DETAIL = 200
_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
_TRUTHY = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class LLMResult(Generic[T]):
    """A validated answer plus what produced it (stored with derivation events)."""

    value: T
    model: str  # as reported by the server when it says, else the configured name
    raw: str  # the text of the answer that validated
    attempts: int  # 1, or 2 when the corrective retry was needed
    usage: dict[str, int] | None  # token counts summed over the attempts


@dataclass(frozen=True)
class _Answer:
    text: str
    model: str
    usage: dict[str, int] | None
    finish_reason: str | None


class LLMClient:
    """Ask an OpenAI-compatible chat endpoint for JSON; safe to share across threads."""

    def __init__(self, settings: Settings) -> None:
        _check_settings(settings)
        self._settings = settings
        self._base_url = settings.llm_base_url
        self._model = settings.llm_model
        self._api_key = settings.llm_api_key
        # The openai client (and the httpx pool under it) is thread-safe, so one
        # instance serves every thread.
        self._client = openai.OpenAI(
            base_url=settings.llm_base_url,
            # Local servers (llama.cpp, Ollama, vLLM) need no key, but the client insists.
            api_key=settings.llm_api_key or "none",
            timeout=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
        )
        self._lock = threading.Lock()
        self._json_mode = _json_mode_setting(settings)

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMClient:
        return cls(settings)

    @property
    def model(self) -> str:
        return self._model

    @property
    def base_url(self) -> str:
        return self._base_url

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LLMClient(base_url={self._base_url!r}, model={self._model!r})"

    def complete_json(
        self,
        *,
        kind: str,
        system: str,
        user: str,
        validate: Callable[[Any], T],
    ) -> LLMResult[T]:
        """Return ``validate(parsed answer)``; raise ``LLMOutputError`` after two bad answers.

        ``kind`` names the task (``"l1_extract"``, ...) in logs and errors.
        ``validate`` should raise ``LLMOutputError`` on a wrong shape; a
        ``KeyError``, ``TypeError`` or ``ValueError`` from it counts the same,
        since a validator that indexes a missing key has found a bad answer.
        """
        messages: list[dict[str, str]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        usage: dict[str, int] | None = None
        started = time.monotonic()
        failure: LLMOutputError | None = None
        answer: _Answer | None = None
        for attempt in (1, 2):
            answer = self._chat(kind, messages)
            usage = _add_usage(usage, answer.usage)
            try:
                value = validate(parse_json_output(answer.text))
            except LLMOutputError as exc:
                failure = exc
            except (KeyError, TypeError, ValueError) as exc:
                failure = LLMOutputError(f"answer has the wrong shape: {exc!r}", raw=answer.text)
            else:
                log.debug(
                    "llm %s: ok after %d attempt(s) in %.2fs (model %s)",
                    kind,
                    attempt,
                    time.monotonic() - started,
                    answer.model,
                )
                return LLMResult(
                    value=value,
                    model=answer.model,
                    raw=answer.text,
                    attempts=attempt,
                    usage=usage,
                )
            reason = _one_line(str(failure))
            if answer.finish_reason == "length":
                reason += " (the answer was cut off at max_tokens)"
            log.info("llm %s: attempt %d gave an unusable answer: %s", kind, attempt, reason)
            if answer.text:
                messages.append({"role": "assistant", "content": answer.text})
            messages.append({"role": "user", "content": _corrective(reason)})

        assert failure is not None and answer is not None
        raise LLMOutputError(
            f"LLM {kind}: no usable JSON from model {self._model!r} at {self._base_url} "
            f"after 2 attempts: {_one_line(str(failure))}",
            raw=answer.text,
        ) from failure

    # -- transport -------------------------------------------------------------

    def _chat(self, kind: str, messages: list[dict[str, str]]) -> _Answer:
        with self._lock:
            json_mode = self._json_mode
        kwargs: dict[str, Any] = {
            "model": self._model,
            "messages": messages,
            "temperature": self._settings.llm_temperature,
            "max_tokens": self._settings.llm_max_tokens,
        }
        if json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        try:
            response = self._client.chat.completions.create(**kwargs)
        except openai.BadRequestError as exc:
            if json_mode and "response_format" in str(exc):
                # The server rejects JSON mode: drop it for good and ask again;
                # the parser copes with free-form answers anyway.
                log.warning(
                    "llm %s: %s rejects response_format; disabling it", kind, self._base_url
                )
                with self._lock:
                    self._json_mode = False
                return self._chat(kind, messages)
            raise self._translate(kind, exc) from exc
        except openai.OpenAIError as exc:
            raise self._translate(kind, exc) from exc

        if not response.choices:
            raise LLMError(
                f"LLM {kind}: {self._base_url} (model {self._model}) answered with no choices"
            )
        choice = response.choices[0]
        usage = None
        if response.usage is not None:
            usage = {k: int(getattr(response.usage, k, 0) or 0) for k in _USAGE_KEYS}
        return _Answer(
            text=choice.message.content or "",
            model=response.model or self._model,
            usage=usage,
            finish_reason=choice.finish_reason,
        )

    def _translate(self, kind: str, exc: openai.OpenAIError) -> LLMError:
        where = f"LLM {kind}: {self._base_url} (model {self._model})"
        retries = self._settings.llm_max_retries
        if isinstance(exc, openai.APITimeoutError):
            return LLMError(
                f"{where} timed out after {self._settings.llm_timeout_s:g}s ({retries} retries)"
            )
        if isinstance(exc, openai.APIConnectionError):
            return LLMError(f"{where} unreachable ({retries} retries): {self._detail(exc)}")
        if isinstance(exc, openai.APIStatusError):
            return LLMError(f"{where} answered HTTP {exc.status_code}: {self._detail(exc)}")
        return LLMError(f"{where} failed: {type(exc).__name__}: {self._detail(exc)}")

    def _detail(self, exc: BaseException) -> str:
        text = _one_line(str(exc))
        if self._api_key:
            # Some servers echo the key back in auth errors.
            text = text.replace(self._api_key, "***")
        return text


def _check_settings(settings: Settings) -> None:
    missing = [
        name for name in ("llm_base_url", "llm_model") if not str(getattr(settings, name)).strip()
    ]
    if missing:
        env = " and ".join("MEMSTORE_" + m.upper() for m in missing)
        raise ConfigError(f"LLM is not configured: set {' and '.join(missing)} (or {env})")


def _json_mode_setting(settings: Settings) -> bool:
    # Off by default: llama.cpp, older vLLM and many proxies reject response_format.
    return settings.llm_json_mode


def _add_usage(total: dict[str, int] | None, more: dict[str, int] | None) -> dict[str, int] | None:
    if more is None:
        return total
    if total is None:
        return dict(more)
    return {k: total.get(k, 0) + more.get(k, 0) for k in _USAGE_KEYS}


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_DETAIL else flat[:_MAX_DETAIL] + "…"


def _corrective(reason: str) -> str:
    return (
        "Your previous answer could not be used: "
        f"{reason}\n"
        "Reply again with only the corrected JSON value, no prose and no code fences."
    )
