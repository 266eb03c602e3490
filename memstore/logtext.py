"""What a log line above DEBUG may say about an error.

Logs are read by people and kept by systems that are not the user's memory
(journald, a log service, a terminal scroll-back), so no log line above DEBUG
carries user text: no message, memory, prompt, query or model answer. Error
messages sometimes quote such text — an unusable model answer begins with the
user's facts, a server's error body can echo the prompt — so callers log
:func:`loggable` at INFO and above and the full message at DEBUG
(:func:`debug_detail`). Credentials are masked in both (:mod:`memstore.redact`).
"""

from __future__ import annotations

import logging
import re

from sqlalchemy.exc import SQLAlchemyError

from memstore.errors import LLMOutputError, MemstoreError
from memstore.redact import redact

_MAX = 300
# Where a message goes on to quote what a server said (its error body, its answer).
_SERVER_WORDS = re.compile(
    r"(answered HTTP \d+|answered with an error|returned an unusable response|"
    r"sent an unusable answer \d+ time\(s\)|returned a malformed embedding response|"
    r"\(model [^)]*\) failed)(?::|\s\().*$",
    re.DOTALL,
)


def loggable(exc: BaseException) -> str:
    """The type of ``exc`` and, when memstore wrote it and it quotes nothing it
    was given, its message; never user text."""
    name = type(exc).__name__
    if isinstance(exc, LLMOutputError):
        return f"{name}: the model's answer was unusable (the answer is logged at DEBUG only)"
    if not isinstance(exc, MemstoreError | SQLAlchemyError | OSError):
        # A dependency's message can hold anything it was handed. SQLAlchemy's
        # carry no statement parameters (the engines hide them), OSError's a path.
        return f"{name} (details at DEBUG)"
    text = _SERVER_WORDS.sub(r"\1", " ".join(redact(str(exc)).split()))
    return f"{name}: {text[:_MAX]}" if text else name


def debug_detail(log: logging.Logger, what: str, exc: BaseException) -> None:
    """The whole error, for whoever turns DEBUG on (credentials still masked)."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s: %s: %s", what, type(exc).__name__, redact(str(exc)))


__all__ = ["debug_detail", "loggable"]
