"""Validated JSON answers from any chat backend; safe to share across threads.

Derivation (L1 extraction, dedup, scenes, persona) only ever needs "send a
system and a user prompt, get back a validated JSON value". This module does
exactly that over a :class:`~memstore.llm.backend.ChatBackend` (memstore's
own OpenAI-compatible endpoint, or a host's model such as Hermes'):

* transport failures are the backend's business (it retries what is worth
  retrying and raises :class:`~memstore.errors.LLMError`); we do not stack a
  second retry loop on top of it;
* an answer that does not parse or validate gets ONE corrective round trip
  quoting the error, because models usually fix their JSON when told what
  was wrong, and a second failure rarely recovers on a third try.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from memstore.config import Settings
from memstore.errors import LLMOutputError
from memstore.llm.backend import ChatAnswer, ChatBackend
from memstore.llm.jsonparse import parse_json_output
from memstore.llm.openai_backend import OpenAIBackend, one_line

log = logging.getLogger("memstore.llm")

T = TypeVar("T")

_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


@dataclass(frozen=True)
class LLMResult(Generic[T]):
    """A validated answer plus what produced it (stored with derivation events)."""

    value: T
    model: str  # as reported by the server when it says, else the configured name
    raw: str  # the text of the answer that validated
    attempts: int  # 1, or 2 when the corrective retry was needed
    usage: dict[str, int] | None  # token counts summed over the attempts


class AnswerObserver(Protocol):
    """Told whether each request ended with usable JSON (the fallback counts them)."""

    def ok(self, describe: str) -> None: ...

    def unusable(self, describe: str) -> None: ...


class LLMClient:
    """Ask a chat backend for JSON. ``LLMClient(settings)`` talks to memstore's own
    endpoint (``llm_base_url``/``llm_model``); ``LLMClient(backend)`` to any other."""

    def __init__(
        self, source: Settings | ChatBackend, *, observer: AnswerObserver | None = None
    ) -> None:
        self._backend: ChatBackend = (
            OpenAIBackend(source) if isinstance(source, Settings) else source
        )
        self._observer = observer

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMClient:
        return cls(settings)

    @property
    def backend(self) -> ChatBackend:
        return self._backend

    @property
    def deriver(self) -> str:
        return self._backend.deriver

    @property
    def model(self) -> str:
        return self._backend.model

    @property
    def base_url(self) -> str:
        return str(getattr(self._backend, "base_url", ""))

    def describe(self) -> str:
        return self._backend.describe()

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LLMClient({self._backend!r})"

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
        answer: ChatAnswer | None = None
        for attempt in (1, 2):
            answer = self._backend.chat(kind, messages)
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
                if self._observer is not None:
                    self._observer.ok(self._backend.describe())
                return LLMResult(
                    value=value,
                    model=answer.model,
                    raw=answer.text,
                    attempts=attempt,
                    usage=usage,
                )
            reason = one_line(str(failure))
            if answer.finish_reason == "length":
                reason += " (the answer was cut off at max_tokens)"
            # The reason quotes the answer, which quotes the user: DEBUG only.
            log.info("llm %s: attempt %d gave an unusable answer", kind, attempt)
            log.debug("llm %s: attempt %d: %s", kind, attempt, reason)
            if answer.text:
                messages.append({"role": "assistant", "content": answer.text})
            messages.append({"role": "user", "content": _corrective(reason)})

        assert failure is not None and answer is not None
        if self._observer is not None:
            self._observer.unusable(self._backend.describe())
        raise LLMOutputError(
            f"LLM {kind}: no usable JSON from {self._backend.describe()} "
            f"after 2 attempts: {one_line(str(failure))}",
            raw=answer.text,
        ) from failure


def _add_usage(total: dict[str, int] | None, more: dict[str, int] | None) -> dict[str, int] | None:
    if more is None:
        return total
    if total is None:
        return dict(more)
    return {k: total.get(k, 0) + more.get(k, 0) for k in _USAGE_KEYS}


def _corrective(reason: str) -> str:
    return (
        "Your previous answer could not be used: "
        f"{reason}\n"
        "Reply again with only the corrected JSON value, no prose and no code fences."
    )
