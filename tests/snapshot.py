"""Projection snapshots live with the benchmarks (memstore.bench.snapshot)."""

from memstore.bench.snapshot import NOT_PROJECTIONS, snapshot

__all__ = ["NOT_PROJECTIONS", "snapshot"]
