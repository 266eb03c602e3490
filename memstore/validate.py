"""Argument checks for every public entry of ``Store``.

Hosts are not type-checked: an id may arrive as ``None`` or ``42``, a limit
as ``float("inf")``. Each check here either returns the value in the type the
code below expects or raises ``InvalidInputError`` naming the argument, so a
caller only ever sees a ``MemstoreError`` and nothing is stored under a
value the caller did not mean.

Ids are refused rather than cleaned: cleaning (stripping spaces, dropping
control characters, replacing lone surrogates) turned distinct inputs such as
``"alice "`` and ``"alice"`` into one tenant, so one user could read and write
another's data.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from memstore.errors import InvalidIdError, InvalidInputError
from memstore.events.log import NewEvent
from memstore.events.types import Event
from memstore.text import clean_text

_SURROGATE = re.compile("[\ud800-\udfff]")
MEMORY_TYPES = ("persona", "episodic", "instruction")
MAX_ID_CHARS = 256
# SQLite integers are signed 64-bit; a bigger Python int overflows in the driver.
MAX_INT = 2**63 - 1


def check_id(name: str, value: object) -> str:
    """``value`` exactly as given, if it is a usable id; never a rewritten one."""
    if not isinstance(value, str):
        raise InvalidIdError(f"{name} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidIdError(f"{name} must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidIdError(f"{name} is longer than {MAX_ID_CHARS} characters")
    if value != value.strip():
        raise InvalidIdError(f"{name} {value!r} has leading or trailing whitespace")
    for ch in value:
        cat = unicodedata.category(ch)
        if cat == "Cc":
            raise InvalidIdError(f"{name} {value!r} contains the control character {ch!r}")
        if cat == "Cs":
            raise InvalidIdError(
                f"{name} {value!r} contains a lone surrogate {ch!r} (not valid Unicode text)"
            )
    return value


def opt_id(name: str, value: object) -> str | None:
    return None if value is None else check_id(name, value)


def check_text(name: str, value: object, *, allow_empty: bool = True) -> str:
    """Text that is stored or compared as given: a str of valid Unicode (a lone
    surrogate cannot be encoded for SQLite)."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise InvalidInputError(f"{name} must not be empty")
    if _SURROGATE.search(value):
        raise InvalidInputError(f"{name} contains a lone surrogate (not valid Unicode text)")
    return value


def check_query(name: str, value: object) -> str:
    """A search text: lone surrogates become U+FFFD (a garbled query still
    gets an answer; it is never stored)."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    return clean_text(value) if _SURROGATE.search(value) else value


def opt_text(name: str, value: object) -> str | None:
    return None if value is None else check_text(name, value)


def opt_name(name: str, value: object) -> str | None:
    """A participant's name as a filter: None, or non-empty text."""
    return None if value is None else check_text(name, value, allow_empty=False).strip()


def check_int(name: str, value: object, *, low: int = 0, high: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidInputError(f"{name} must be between {low} and {high}, got {value}")
    return value


def opt_int(name: str, value: object, *, low: int = 0, high: int = MAX_INT) -> int | None:
    return None if value is None else check_int(name, value, low=low, high=high)


def check_seconds(name: str, value: object, *, high: float = 86_400.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or not 0.0 <= seconds <= high:
        raise InvalidInputError(f"{name} must be between 0 and {high:g} seconds, got {value!r}")
    return seconds


def opt_seconds(name: str, value: object) -> float | None:
    return None if value is None else check_seconds(name, value)


def opt_number(name: str, value: object) -> float | None:
    """None, or a finite number (e.g. recall's relevance threshold)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise InvalidInputError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be true or false, got {type(value).__name__}")
    return value


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise InvalidInputError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def opt_choice(name: str, value: object, choices: Sequence[str]) -> str | None:
    return None if value is None else check_choice(name, value, choices)


def search_limit(value: object) -> object:
    """Search limits stay lenient (text from a CLI or a tool call is clamped,
    nonsense gives the default), but a number must be a finite one."""
    if isinstance(value, bool):
        raise InvalidInputError("limit must be a number, got bool")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInputError(f"limit must be a finite number, got {value!r}")
    if isinstance(value, int) and not -MAX_INT <= value <= MAX_INT:
        raise InvalidInputError(f"limit is out of range: {value}")
    return value


def check_strings(name: str, value: object) -> list[str] | None:
    """An optional list of strings (event types, projection names)."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise InvalidInputError(f"{name} must be a list of strings, got {type(value).__name__}")
    return [check_text(f"{name} item", item) for item in value]


def opt_callable(name: str, value: object) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise InvalidInputError(f"{name} must be callable, got {type(value).__name__}")
    return value


def check_sequence(name: str, value: object) -> Sequence[Any]:
    """A list or tuple (not a mapping, text or a one-shot iterator)."""
    if isinstance(value, str | bytes | bytearray) or not isinstance(value, Sequence):
        raise InvalidInputError(f"{name} must be a list, got {type(value).__name__}")
    return value


def check_new_events(value: object) -> list[NewEvent]:
    """Events for ``Store.append``: ``NewEvent`` objects whose fields have the
    declared types (the log assumes them)."""
    out: list[NewEvent] = []
    for i, ev in enumerate(check_sequence("events", value)):
        if not isinstance(ev, NewEvent):
            raise InvalidInputError(f"events[{i}] must be a NewEvent, got {type(ev).__name__}")
        if not isinstance(ev.payload, Event) or not type(ev.payload).TYPE:
            raise InvalidInputError(f"events[{i}].payload must be a registered Event")
        check_text(f"events[{i}].stream", ev.stream, allow_empty=False)
        if ev.user_id != "":
            check_id(f"events[{i}].user_id", ev.user_id)
        for name in ("idempotency_key", "causation_id", "correlation_id"):
            opt_text(f"events[{i}].{name}", getattr(ev, name))
        opt_int(f"events[{i}].expected_seq", ev.expected_seq)
        if ev.occurred_at is not None and not isinstance(ev.occurred_at, datetime):
            raise InvalidInputError(f"events[{i}].occurred_at must be a datetime")
        out.append(ev)
    return out


__all__ = [
    "MAX_ID_CHARS",
    "MEMORY_TYPES",
    "check_bool",
    "check_choice",
    "check_id",
    "check_int",
    "check_new_events",
    "check_query",
    "check_seconds",
    "check_sequence",
    "check_strings",
    "check_text",
    "opt_callable",
    "opt_choice",
    "opt_id",
    "opt_int",
    "opt_seconds",
    "opt_text",
    "search_limit",
]
