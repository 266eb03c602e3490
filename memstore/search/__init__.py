"""Search over L0 messages and L1 memories: keyword (FTS5), vector (sqlite-vec), hybrid (RRF)."""

from memstore.search.engine import STRATEGIES, Hit, SearchEngine, clamp_limit

__all__ = ["STRATEGIES", "Hit", "SearchEngine", "clamp_limit"]
