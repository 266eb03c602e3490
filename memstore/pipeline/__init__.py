"""Durable scheduling of the derivation pipeline (what runs L1/L2/L3, when).

See ``service`` for the flow, ``state`` for the projection, ``queue`` for
work items and locks, ``scheduler`` for the APScheduler timers (and how
a stored job reaches its service), ``lease`` for the one-scheduler election.

The names below load on first use: a command that only reads (``memstore
search``) checks the pipeline's projection (``state``) without importing
the service and APScheduler.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstore.pipeline.runner import Deriver, Outcome
    from memstore.pipeline.service import PipelineService
    from memstore.pipeline.state import PipelineStateProjection, threshold_for

_LAZY = {
    "Deriver": "memstore.pipeline.runner",
    "Outcome": "memstore.pipeline.runner",
    "PipelineService": "memstore.pipeline.service",
    "PipelineStateProjection": "memstore.pipeline.state",
    "threshold_for": "memstore.pipeline.state",
}

__all__ = [
    "Deriver",
    "Outcome",
    "PipelineService",
    "PipelineStateProjection",
    "threshold_for",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memstore.pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
