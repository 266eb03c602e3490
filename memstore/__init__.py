"""memstore: event-sourced long-term memory for LLM agents on one SQLite file.

The public API is ``Store`` and the records its methods take and return,
all importable from here (``from memstore import Store, Recall, Memory``).
"""

from typing import TYPE_CHECKING, Any

from memstore.config import Settings
from memstore.errors import *  # noqa: F403
from memstore.errors import __all__ as _errors_all
from memstore.records import *  # noqa: F403  (TypedDicts: cheap to import)
from memstore.records import __all__ as _records_all

if TYPE_CHECKING:
    from memstore.derive.messages.capture import CaptureResult
    from memstore.derive.runs import RunOutcome
    from memstore.events.log import NewEvent, StoredEvent
    from memstore.forgetting.erasure import ErasureReport
    from memstore.forgetting.forget import ForgetReport
    from memstore.pipeline.runner import Outcome
    from memstore.projections.base import ProjectionStatus
    from memstore.recall.compose import Recall, RecalledMemory, RecalledMessage
    from memstore.search import Hit
    from memstore.store import Store

__version__ = "0.1.0"

# Store pulls in SQLAlchemy, numpy and openai: these load on first use so that
# `memstore --help` and light imports stay fast.
_LAZY = {
    "Store": "memstore.store",
    "CaptureResult": "memstore.derive.messages.capture",
    "Recall": "memstore.recall.compose",
    "RecalledMemory": "memstore.recall.compose",
    "RecalledMessage": "memstore.recall.compose",
    "Hit": "memstore.search",
    "ErasureReport": "memstore.forgetting.erasure",
    "ForgetReport": "memstore.forgetting.forget",
    "RunOutcome": "memstore.derive.runs",
    "Outcome": "memstore.pipeline.runner",
    "NewEvent": "memstore.events.log",
    "StoredEvent": "memstore.events.log",
    "ProjectionStatus": "memstore.projections.base",
}

__all__ = [
    "Settings",
    "__version__",
    "CaptureResult",
    "ErasureReport",
    "ForgetReport",
    "Hit",
    "NewEvent",
    "Outcome",
    "ProjectionStatus",
    "Recall",
    "RecalledMemory",
    "RecalledMessage",
    "RunOutcome",
    "Store",
    "StoredEvent",
    *_records_all,
    *_errors_all,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memstore' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
