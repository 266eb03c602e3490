"""The projections every store keeps, named apart from the store: a command
that reads an existing store without opening one (``memstore search``)
checks them without importing the rest of the engine."""

from __future__ import annotations

from memstore.derive import derive_projections
from memstore.derive.messages.projection import L0Projection
from memstore.pipeline.state import PipelineStateProjection
from memstore.projections.base import Projection
from memstore.projections.stats import StatsProjection


def default_projections() -> list[Projection]:
    """Every projection a store keeps, in the order they are registered."""
    return [StatsProjection(), L0Projection(), *derive_projections(), PipelineStateProjection()]


__all__ = ["default_projections"]
