"""Credentials out of everything memstore records, logs, prints or keys on.

Endpoint URLs may carry a password (``http://bob:pw@host/v1``,
``postgresql://u:pw@db/x``) or a key in the query (``?api_key=...``), and
clients quote their URL in error messages (openai, httpx, SQLAlchemy). Every
boundary that turns such a text into an event, a table row, a log line, a
CLI or HTTP answer, or an identity (an embedding space) goes through
:func:`redact` or :func:`strip_credentials`, so there is one rule for what
counts as a secret.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

# scheme://userinfo@ — the userinfo is everything up to the last "@" before
# the host's end ("/", "?", "#", whitespace, a quote or a bracket).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<info>[^/?#\s'\"<>()\[\]]*)@")
# Query and key=value parameters whose value is a credential.
_SECRET_PARAM = re.compile(
    r"(?P<name>\b(?:password|passwd|pwd|api[_-]?key|apikey|access[_-]?token|token|secret|"
    r"client[_-]?secret|sig|signature|key)=)(?P<value>[^&\s'\"#]+)",
    re.IGNORECASE,
)


def redact(text: str, *, keep_bare_user: bool = False) -> str:
    """``text`` with the credentials of every URL in it masked: the password of
    ``user:password@`` (the user name stays), a bare ``token@`` as a whole
    unless ``keep_bare_user`` (a database URL's user name), and secret query
    parameters."""
    if "@" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: _masked(m, keep_bare_user), text)
    if "://" in text or "?" in text:
        text = _SECRET_PARAM.sub(lambda m: f"{m['name']}{MASK}", text)
    return text


def _masked(m: re.Match[str], keep_bare_user: bool) -> str:
    user, colon, _ = m["info"].partition(":")
    if colon:
        return f"{m['scheme']}{user}:{MASK}@"
    return f"{m['scheme']}{user if keep_bare_user else MASK}@"


def strip_credentials(url: str) -> str:
    """``url`` without its userinfo and credential parameters: what a URL is
    called in messages, and the identity of the endpoint behind it (the same
    server with a rotated password is the same server)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if not parts.scheme or not parts.netloc:
        return redact(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = "&".join(p for p in parts.query.split("&") if p and not _SECRET_PARAM.fullmatch(p))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class RedactingFilter(logging.Filter):
    """Masks credentials in a record's message (httpx logs every request URL)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the logging module's business
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = RedactingFilter()
# The HTTP clients under memstore's endpoints log request URLs themselves.
_CLIENT_LOGGERS = ("httpx", "httpcore", "openai", "openai._base_client")


def install_log_redaction() -> None:
    """Mask credentials in what the HTTP client libraries log (idempotent)."""
    for name in _CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


__all__ = ["MASK", "RedactingFilter", "install_log_redaction", "redact", "strip_credentials"]
