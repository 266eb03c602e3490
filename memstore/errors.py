"""Every error memstore raises on purpose.

::

    MemstoreError
    ├── ConfigError            bad setting, unknown embedder / strategy name
    ├── InvalidInputError      caller passed something unusable (bad role, empty user id)
    │   └── InvalidIdError     an id refused rather than rewritten (" alice", control chars)
    ├── StorageError           the SQLite file could not be opened, read or written
    │   ├── ExtensionError     sqlite-vec or FTS5 is unavailable on this SQLite
    │   ├── LockedError        another writer held the database past busy_timeout
    │   └── MigrationError     schema is missing, behind, or ahead of this code
    ├── EventError
    │   ├── ConcurrencyError   stream sequence already taken (optimistic concurrency)
    │   ├── UnknownEventTypeError   log holds a type this code does not know
    │   └── UpcastError        no upcaster from a stored version to the current one
    ├── ProjectionError        a projection could not apply or rebuild
    ├── EmbeddingError         embedder failed, NaN/inf vectors, dimension mismatch
    ├── LLMError               the language model could not be reached
    │   └── LLMOutputError     its answer could not be parsed or validated
    ├── PipelineError          derivation state is inconsistent or a run failed
    └── NotFoundError          a memory / scene / event id that does not exist

Errors from dependencies (sqlite3, SQLAlchemy, openai) are translated at the
boundary with ``raise ... from`` so callers only ever need ``MemstoreError``.
"""

from __future__ import annotations


class MemstoreError(Exception):
    """Base class of every error memstore raises on purpose."""


class ConfigError(MemstoreError):
    pass


class InvalidInputError(MemstoreError, ValueError):
    pass


class InvalidIdError(InvalidInputError):
    """An id (user, session, agent, message) memstore will not store or look up:
    refused, never cleaned into another id."""


class StorageError(MemstoreError):
    pass


class ExtensionError(StorageError):
    pass


class LockedError(StorageError):
    pass


class MigrationError(StorageError):
    pass


class EventError(MemstoreError):
    pass


class ConcurrencyError(EventError):
    def __init__(self, stream: str, expected: int | None, detail: str = "") -> None:
        self.stream = stream
        self.expected = expected
        msg = f"stream {stream!r}: sequence conflict"
        if expected is not None:
            msg += f" (expected to append at version {expected})"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class UnknownEventTypeError(EventError):
    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        super().__init__(
            f"unknown event type {type_name!r}: this memstore version cannot read it "
            "(written by a newer version, or a typo in a registration)"
        )


class UpcastError(EventError):
    pass


class ProjectionError(MemstoreError):
    pass


class EmbeddingError(MemstoreError):
    pass


class LLMError(MemstoreError):
    pass


class LLMOutputError(LLMError):
    def __init__(self, message: str, raw: str = "") -> None:
        self.raw = raw
        super().__init__(message)


class PipelineError(MemstoreError):
    pass


class NotFoundError(MemstoreError, LookupError):
    pass


__all__ = [
    "ConcurrencyError",
    "ConfigError",
    "EmbeddingError",
    "EventError",
    "ExtensionError",
    "InvalidIdError",
    "InvalidInputError",
    "LLMError",
    "LLMOutputError",
    "LockedError",
    "MemstoreError",
    "MigrationError",
    "NotFoundError",
    "PipelineError",
    "ProjectionError",
    "StorageError",
    "UnknownEventTypeError",
    "UpcastError",
]
