"""The seam between derivation and whatever answers its prompts.

Derivation needs one operation: send chat messages, get back the answer's
text. :class:`ChatBackend` is that operation plus the names derivation records
in its events (``deriver``, ``model``) and shows in ``doctor``/status
(``describe``). memstore ships one backend, the OpenAI-compatible endpoint of
its own settings (:mod:`memstore.llm.openai_backend`); a host that already has
a model (Hermes) lends its own to a store with ``Store.use_host_llm``. Nothing
in :mod:`memstore.derive` knows which one it talks to, and no host is
imported here.

A backend raises :class:`~memstore.errors.LLMError` (never a dependency's
exception) when no answer came back, after whatever transport retries it does
itself. What the answer *says* is checked a level up, in
:class:`memstore.llm.client.LLMClient`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


@dataclass(frozen=True)
class ChatAnswer:
    """One answer: its text and what produced it."""

    text: str
    model: str  # as the server reports it, else the backend's configured name
    usage: dict[str, int] | None
    finish_reason: str | None


@runtime_checkable
class ChatBackend(Protocol):
    """Something that answers chat messages; must be safe to share across threads."""

    @property
    def deriver(self) -> str:
        """What derivation events record as the deriver ("llm", "hermes", ...)."""
        ...

    @property
    def model(self) -> str:
        """The model asked for, as far as known before a call ("" = the host decides)."""
        ...

    def describe(self) -> str:
        """One line for ``doctor`` and status output; never contains a secret."""
        ...

    def chat(self, kind: str, messages: Sequence[Mapping[str, str]]) -> ChatAnswer:
        """Answer ``messages`` (OpenAI chat format); ``kind`` names the task in errors."""
        ...

    def close(self) -> None: ...


def usage_of(raw: object) -> dict[str, int] | None:
    """Token counts from a usage object or mapping; None when there is none."""
    if raw is None:
        return None
    out: dict[str, int] = {}
    for key in USAGE_KEYS:
        value = raw.get(key) if isinstance(raw, Mapping) else getattr(raw, key, None)
        out[key] = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return out


def text_of(content: object) -> str:
    """An answer's ``content``: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            text = part.get("text") if isinstance(part, Mapping) else getattr(part, "text", None)
            if isinstance(text, str):
                parts.append(text)
        return "".join(parts)
    return ""


__all__ = [
    "USAGE_KEYS",
    "ChatAnswer",
    "ChatBackend",
    "text_of",
    "usage_of",
]
