"""The projection snapshots the tests compare (they live in the package: the chaos
bench uses them too)."""

from memstore.bench.snapshot import FTS_TABLES, NOT_PROJECTIONS, snapshot

__all__ = ["FTS_TABLES", "NOT_PROJECTIONS", "snapshot"]
