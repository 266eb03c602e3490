"""Search over L0 messages and L1 memories: keyword (FTS5), vector (sqlite-vec), hybrid (RRF)."""

from memstore.search.engine import STRATEGIES, SearchEngine, clamp_limit
from memstore.search.hits import Hit

__all__ = ["STRATEGIES", "Hit", "SearchEngine", "clamp_limit"]
