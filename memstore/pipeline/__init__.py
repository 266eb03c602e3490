"""Durable scheduling of the derivation pipeline (what runs L1/L2/L3, when).

See ``service`` for the flow, ``state`` for the projection, ``queue`` for
work items and locks, ``scheduler`` for the APScheduler timers (and how
a stored job reaches its service), ``lease`` for the one-scheduler election.
"""

from memstore.pipeline.runner import Deriver, Outcome
from memstore.pipeline.service import PipelineService
from memstore.pipeline.state import PipelineStateProjection, threshold_for

__all__ = [
    "Deriver",
    "Outcome",
    "PipelineService",
    "PipelineStateProjection",
    "threshold_for",
]
