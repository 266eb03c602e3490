"""memstore: event-sourced long-term memory for LLM agents on one SQLite file."""

from typing import TYPE_CHECKING, Any

from memstore.config import Settings
from memstore.errors import *  # noqa: F403
from memstore.errors import __all__ as _errors_all

if TYPE_CHECKING:
    from memstore.derive.recall import Recall, RecalledMemory, RecalledMessage
    from memstore.l0.capture import CaptureResult
    from memstore.store import Store

__version__ = "0.1.0"
__all__ = [
    "CaptureResult",
    "Recall",
    "RecalledMemory",
    "RecalledMessage",
    "Settings",
    "Store",
    "__version__",
    *_errors_all,
]

# Store pulls in SQLAlchemy, numpy and openai: these load on first use so that
# `memstore --help` and light imports stay fast.
_LAZY = {
    "Store": "memstore.store",
    "CaptureResult": "memstore.l0.capture",
    "Recall": "memstore.derive.recall",
    "RecalledMemory": "memstore.derive.recall",
    "RecalledMessage": "memstore.derive.recall",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memstore' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
