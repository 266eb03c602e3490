"""Where a store lives: a SQLite file path or a PostgreSQL URL.

``Store.open``, ``MEMSTORE_DB`` and ``--db`` take either. Anything with a URL
scheme is a URL: a supported one opens PostgreSQL, any other is refused with
``InvalidInputError`` — it must never become a local file or folder named
after the URL (``Path("mysql://h/db")`` would be ``mysql:/h/db``, a folder
called ``mysql:``). ``sqlite:///path`` is accepted as a spelled-out file path.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from memstore.errors import InvalidInputError
from memstore.redact import redact

# Two or more characters before ":/" so a Windows drive ("C:/x") stays a path;
# one slash is enough because ``Path`` folds "//" into "/".
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):/")
# The SQLAlchemy driver we test against; "postgresql://" and "postgres://"
# (libpq's and Heroku's spellings) mean the same server through it.
PG_DRIVER = "postgresql+psycopg"
_PG_SCHEMES = {"postgresql", "postgres", "postgresql+psycopg"}


@dataclass(frozen=True)
class Target:
    """A resolved store location: exactly one of ``path`` and ``url`` is set."""

    path: Path | None = None
    url: str | None = None

    @property
    def is_postgres(self) -> bool:
        return self.url is not None


def looks_like_url(value: str | os.PathLike[str]) -> bool:
    return _SCHEME.match(os.fspath(value)) is not None


def parse(value: str | os.PathLike[str]) -> Target:
    """A path or URL given by a user (argument, ``MEMSTORE_DB``, ``--db``)."""
    try:
        raw = os.fspath(value)
    except TypeError:
        raise InvalidInputError(
            f"a database is a file path or a URL, not {type(value).__name__}"
        ) from None
    if not isinstance(raw, str):
        raise InvalidInputError("a database path must be text, not bytes")
    if "\x00" in raw:
        # The OS cannot name such a file; the driver would raise ValueError.
        where = safe_url(raw) if _SCHEME.match(raw) else raw
        raise InvalidInputError(f"database location {where!r} contains a NUL character")
    m = _SCHEME.match(raw)
    if m is None:
        return Target(path=Path(raw).expanduser())
    scheme = m.group(1).lower()
    if scheme == "sqlite":
        rest = raw[len(m.group(0)) :]
        if not raw.startswith("sqlite:///") or not rest.strip("/"):
            raise InvalidInputError(
                f"{safe_url(raw)}: a SQLite URL names a file as sqlite:///relative/path "
                "or sqlite:////absolute/path"
            )
        return Target(path=Path(raw.removeprefix("sqlite:///")).expanduser())
    if scheme in _PG_SCHEMES:
        if not raw[len(scheme) :].startswith("://"):
            # Path() folds "//" into "/": the URL went through a file-path type.
            raise InvalidInputError(
                f"{safe_url(raw)} is a PostgreSQL URL folded into a file path; pass the URL "
                f"as a string ({PG_DRIVER}://user@host:port/db), with both slashes"
            )
        return Target(url=PG_DRIVER + raw[len(scheme) :])
    raise InvalidInputError(
        f"unsupported database URL scheme {scheme!r} in {safe_url(raw)}: memstore opens a SQLite "
        f"file path or a PostgreSQL URL ({PG_DRIVER}://user@host:port/db)"
    )


def safe_url(raw: str) -> str:
    """The URL with any password replaced, for messages."""
    # A database URL's bare user name is no secret, and PostgreSQL stores are
    # keyed by this text (their timers carry it): only passwords are masked.
    return redact(raw, keep_bare_user=True)
