"""memstore: event-sourced long-term memory for LLM agents on one SQLite file."""

from memstore.config import Settings
from memstore.derive.recall import Recall, RecalledMemory, RecalledMessage
from memstore.errors import *  # noqa: F403
from memstore.errors import __all__ as _errors_all
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
