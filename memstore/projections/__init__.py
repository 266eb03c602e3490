"""Projections: tables derived from the log, rebuildable at any time."""

from memstore.projections.base import Projection, Projections

__all__ = ["Projection", "Projections"]
