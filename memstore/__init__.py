"""memstore: event-sourced long-term memory for LLM agents on one SQLite file."""

from typing import TYPE_CHECKING, Any

from memstore.config import Settings
from memstore.errors import *  # noqa: F403
from memstore.errors import __all__ as _errors_all

if TYPE_CHECKING:
    from memstore.l0.capture import CaptureResult
    from memstore.store import Store

__version__ = "0.1.0"
__all__ = ["CaptureResult", "Settings", "Store", "__version__", *_errors_all]


def __getattr__(name: str) -> Any:
    # Store pulls in SQLAlchemy, numpy and openai: load it on first use so that
    # `memstore --help` and light imports stay fast.
    if name == "Store":
        from memstore.store import Store

        return Store
    if name == "CaptureResult":
        from memstore.l0.capture import CaptureResult

        return CaptureResult
    raise AttributeError(f"module 'memstore' has no attribute {name!r}")
