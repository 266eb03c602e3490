"""Gateway settings: where it listens, who may call it, how much it accepts."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass, field

from memstore.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8420
DEFAULT_MAX_BODY = 8 * 1024 * 1024
# Host names every gateway answers to: a browser on this machine reaches it by these.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# One /seed request extracts every session it brings before answering: bound
# the work (a larger history goes in several requests, or through `memstore import`).
DEFAULT_SEED_MAX_SESSIONS = 200
DEFAULT_SEED_MAX_MESSAGES = 5000


def _env(*names: str) -> str | None:
    """The first of ``names`` set to something other than whitespace."""
    for name in names:
        raw = os.environ.get(name)
        if raw is not None and raw.strip():
            return raw.strip()
    return None


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class GatewayConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    # Bearer token every route but GET /health requires; None = no auth.
    api_key: str | None = None
    # Origins that get CORS headers; "*" allows any (development only).
    cors_origins: tuple[str, ...] = field(default_factory=tuple)
    max_body_bytes: int = DEFAULT_MAX_BODY
    # The user of requests that name none (the upstream ignored user_id).
    default_user: str = "default"
    insecure: bool = False
    # The inspector (/ui) shows no action and refuses changes; /mcp offers no
    # tool that writes.
    read_only: bool = False
    access_log: bool = False
    # /session/end and /seed extract what is pending before answering, bounded.
    session_end_timeout_s: float = 8.0
    # The whole /seed request's wait for extraction, across all its sessions.
    seed_timeout_s: float = 120.0
    seed_max_sessions: int = DEFAULT_SEED_MAX_SESSIONS
    seed_max_messages: int = DEFAULT_SEED_MAX_MESSAGES
    # Host header values accepted besides the loopback names and the bound
    # address ("*" = any; only behind a proxy that checks Host itself).
    allowed_hosts: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_env(cls, **overrides: object) -> GatewayConfig:
        """Defaults, then MEMSTORE_GATEWAY_* (falling back to the upstream's
        TDAI_* names), then explicit ``overrides`` that are not None."""
        values: dict[str, object] = {}
        key = _env("MEMSTORE_GATEWAY_API_KEY", "TDAI_GATEWAY_API_KEY")
        if key:
            values["api_key"] = key
        cors = _env("MEMSTORE_GATEWAY_CORS_ORIGINS", "TDAI_CORS_ORIGINS")
        if cors:
            values["cors_origins"] = tuple(o.strip() for o in cors.split(",") if o.strip())
        host = _env("MEMSTORE_GATEWAY_HOST", "TDAI_GATEWAY_HOST")
        if host:
            values["host"] = host
        port = _env("MEMSTORE_GATEWAY_PORT", "TDAI_GATEWAY_PORT")
        if port:
            values["port"] = _int("port", port)
        user = _env("MEMSTORE_GATEWAY_DEFAULT_USER")
        if user:
            values["default_user"] = user
        hosts = _env("MEMSTORE_GATEWAY_ALLOWED_HOSTS")
        if hosts:
            values["allowed_hosts"] = tuple(h.strip() for h in hosts.split(",") if h.strip())
        body = _env("MEMSTORE_GATEWAY_MAX_BODY_BYTES")
        if body:
            values["max_body_bytes"] = _int("max body bytes", body)
        values.update({k: v for k, v in overrides.items() if v is not None})
        cfg = cls(**values)  # type: ignore[arg-type]
        cfg.check()
        return cfg

    def check(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {self.port}")
        if self.max_body_bytes < 1024:
            raise ConfigError("max body bytes must be at least 1024")
        if not self.default_user.strip() or self.default_user != self.default_user.strip():
            raise ConfigError(f"default user {self.default_user!r} is not a valid user id")
        if self.api_key is not None:
            check_api_key(self.api_key)
        if self.seed_max_sessions < 1 or self.seed_max_messages < 1:
            raise ConfigError("the /seed limits must be at least 1")
        for name in self.allowed_hosts:
            if name != "*" and not _HOST_NAME.fullmatch(name):
                raise ConfigError(
                    f"allowed host {name!r} is not a host name or address (no scheme, "
                    "no port, no path: e.g. memory.example.org or 192.168.1.20)"
                )
        if not is_loopback(self.host) and not self.api_key and not self.insecure:
            raise ConfigError(
                f"refusing to listen on {self.host} without an API key: anyone who can reach "
                "it could read and erase every user's memory. Set MEMSTORE_GATEWAY_API_KEY, "
                "or pass --insecure if a proxy in front of it authenticates callers"
            )

    def host_names(self) -> frozenset[str] | None:
        """The Host header names this gateway answers to (lowercase, no port);
        None when any is accepted."""
        if "*" in self.allowed_hosts:
            return None
        names = {*LOOPBACK_NAMES, *(h.lower() for h in self.allowed_hosts)}
        bound = self.host.strip("[]").lower()
        if _is_wildcard(bound):
            # Reachable under this machine's own names; other names (a DNS
            # alias, a NAT address) are added with --allowed-host.
            names.update(n.lower() for n in _own_names())
        else:
            names.add(bound)
        return frozenset(names)


_HOST_NAME = re.compile(r"[A-Za-z0-9._-]+|\[?[0-9A-Fa-f:.]+\]?")


def check_api_key(key: str) -> None:
    """A key a client can send in a header and that can ever match: printable
    ASCII without spaces (HTTP headers are Latin-1 at best; clients differ)."""
    if not key.strip():
        raise ConfigError("the API key must not be blank")
    bad = [c for c in key if not 0x21 <= ord(c) <= 0x7E]
    if bad:
        raise ConfigError(
            f"the API key contains {bad[0]!r}: use printable ASCII without spaces "
            "(for example: openssl rand -hex 24)"
        )


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _own_names() -> set[str]:
    names: set[str] = set()
    try:
        hostname = socket.gethostname()
        names.update({hostname, socket.getfqdn()})
        names.update(socket.gethostbyname_ex(hostname)[2])
    except OSError:
        pass
    return {n for n in names if n}


def _int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"gateway {name} must be an integer, got {raw!r}") from None


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "GatewayConfig", "check_api_key", "is_loopback"]
