"""Which memstore user a Hermes agent speaks for.

Hermes hands ``initialize`` what its host knows about the caller: messaging
platforms (Telegram, Discord, Slack, ...) pass the sender's ``user_id`` and a
``gateway_session_key`` per chat; the api_server passes only the caller's
``X-Hermes-Session-Key`` (as ``gateway_session_key``) and the session id; the
CLI, the TUI and editor (ACP) sessions pass neither, because one person owns
them. Taking "default" for everyone, as a single-user library would, hands
one caller's memories to the next; so the memstore user is resolved from the
most specific identity the host gives, under an explicit ``user_scope``:

``auto`` (default)
    host ``user_id`` → session key → configured ``user_id`` → "default" on a
    single-user local platform → the session id (with one warning).
``user``
    the host's ``user_id``; without one, the session key, then the session id
    (a configured ``user_id`` is used only on local platforms).
``session_key``
    one memory per ``gateway_session_key`` (per chat), else per session id.
``shared``
    everybody is the configured ``user_id`` (or "default"): one memory on purpose.

Ids from a multi-user platform are prefixed with the platform
(``telegram:12345``, ``api_server:key:alice``), so two platforms' numbering
and a user id that happens to equal a session key never meet.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from memstore.errors import InvalidIdError
from memstore.validate import check_id

from .settings import UserScope

log = logging.getLogger("memstore.hermes")

USER_SCOPES: tuple[UserScope, ...] = get_args(UserScope)
DEFAULT_USER = "default"

# Hermes platforms one person owns: the interactive CLI and TUI, the desktop
# app's chat panel, editor sessions over ACP and the local gateway channel. An
# empty platform is a direct library caller (AIAgent without a platform).
LOCAL_PLATFORMS = frozenset({"", "cli", "tui", "desktop", "acp", "local"})

MAX_USER_ID = 256
_HASHED_TAIL = 24


@dataclass(frozen=True)
class Identity:
    """The resolved memstore user and where it came from (for logs and status)."""

    user_id: str
    source: Literal["host_user", "session_key", "configured", "local_default", "session", "shared"]
    platform: str


def _given(name: str, value: object) -> str:
    """An id the host passed, as given ("" when it passed none). A padded or
    otherwise unusable one is refused (InvalidIdError), never cleaned: " 123"
    and "123" must not become one user."""
    if value is None or value == "":
        return ""
    text = value if isinstance(value, str) else str(value)
    if text != text.strip():
        raise InvalidIdError(f"{name} {text!r} has leading or trailing whitespace")
    # Over-long ids are bounded below (head + hash), so only the kept head is checked.
    check_id(name, _bounded(text))
    return text


def _bounded(uid: str) -> str:
    # memstore ids are at most 256 characters; Hermes allows 256-character
    # session keys, so a long one keeps a readable head and a hash of the whole.
    if len(uid) <= MAX_USER_ID:
        return uid
    digest = hashlib.sha256(uid.encode("utf-8", "surrogatepass")).hexdigest()[:_HASHED_TAIL]
    return f"{uid[: MAX_USER_ID - _HASHED_TAIL - 1]}~{digest}"


def _scoped(platform: str, kind: str, value: str) -> str:
    if platform in LOCAL_PLATFORMS and kind == "user":
        return _bounded(value)
    head = platform or "local"
    return _bounded(f"{head}:{value}" if kind == "user" else f"{head}:{kind}:{value}")


def resolve_identity(
    kwargs: Mapping[str, Any],
    session_id: str,
    *,
    scope: UserScope,
    configured: str | None,
) -> Identity:
    """The memstore user for one ``initialize(session_id, **kwargs)`` call."""
    platform = " ".join(str(kwargs.get("platform") or "").split()).lower()
    host_user = _given("user_id", kwargs.get("user_id"))
    key = _given("gateway_session_key", kwargs.get("gateway_session_key"))
    local = platform in LOCAL_PLATFORMS
    fixed = _given("memory.memstore.user_id", configured)

    if scope == "shared":
        return Identity(_bounded(fixed or DEFAULT_USER), "shared", platform)
    if scope in ("auto", "user") and host_user:
        return Identity(_scoped(platform, "user", host_user), "host_user", platform)
    if key:
        return Identity(_scoped(platform, "key", key), "session_key", platform)
    if fixed and (scope == "auto" or local):
        return Identity(_bounded(fixed), "configured", platform)
    if local:
        return Identity(DEFAULT_USER, "local_default", platform)
    _warn_once(platform, scope)
    return Identity(_scoped(platform, "session", session_id), "session", platform)


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _warn_once(platform: str, scope: str) -> None:
    with _warned_lock:
        if (platform, scope) in _warned:
            return
        _warned.add((platform, scope))
    log.warning(
        "memstore: platform %r gave no user id and no session key, so each session "
        "gets its own memory (nothing carries over between conversations). Send "
        "X-Hermes-Session-Key per caller (api_server), or set memory.memstore.user_id "
        "for a single-user deployment, or user_scope: shared to share one memory on purpose.",
        platform or "?",
    )


__all__ = [
    "DEFAULT_USER",
    "LOCAL_PLATFORMS",
    "USER_SCOPES",
    "Identity",
    "UserScope",
    "resolve_identity",
]
