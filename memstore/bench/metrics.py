"""Retrieval metrics for one query, and a percentile for latencies.

Every ranking function takes the ids a search returned, best first, and the
set of ids that are relevant (for LoCoMo: the evidence dialogue ids). A
retrieved id counts once even if a search returns it twice, so no metric
can exceed 1. Averaging a per-query value over queries gives the usual
figure (the mean of :func:`mrr` values is the MRR).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence

from memstore.errors import InvalidInputError

__all__ = ["hit_at_k", "mean", "mrr", "ndcg_at_k", "percentile", "recall_at_k"]


def _check(relevant: Collection[str], k: int | None) -> set[str]:
    # Recall of nothing is undefined, not 0 or 1: silently scoring such a
    # query would bias the mean, so the caller must skip it explicitly.
    if not relevant:
        raise InvalidInputError("relevant is empty: the metric is undefined for this query")
    if k is not None and k < 1:
        raise InvalidInputError(f"k must be >= 1, got {k}")
    return set(relevant)


def _first_hits(retrieved: Sequence[str], relevant: set[str], k: int | None) -> list[int]:
    """0-based ranks (within the top k) where a relevant id first appears."""
    seen: set[str] = set()
    ranks: list[int] = []
    for rank, doc in enumerate(retrieved[:k] if k is not None else retrieved):
        if doc in relevant and doc not in seen:
            seen.add(doc)
            ranks.append(rank)
    return ranks


def recall_at_k(retrieved: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Fraction of the relevant ids found among the first ``k`` retrieved."""
    rel = _check(relevant, k)
    return len(_first_hits(retrieved, rel, k)) / len(rel)


def hit_at_k(retrieved: Sequence[str], relevant: Collection[str], k: int) -> float:
    """1.0 if any relevant id is among the first ``k`` retrieved, else 0.0."""
    rel = _check(relevant, k)
    return 1.0 if _first_hits(retrieved, rel, k) else 0.0


def ndcg_at_k(retrieved: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Normalised discounted cumulative gain with binary relevance.

    DCG sums ``1 / log2(rank + 1)`` (rank 1-based) over relevant hits in the
    top ``k``; the ideal DCG puts ``min(k, |relevant|)`` hits first.
    """
    rel = _check(relevant, k)
    dcg = sum(1.0 / math.log2(rank + 2) for rank in _first_hits(retrieved, rel, k))
    ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(k, len(rel))))
    return dcg / ideal


def mrr(retrieved: Sequence[str], relevant: Collection[str], k: int | None = None) -> float:
    """Reciprocal rank of the first relevant id (within the top ``k`` if
    given), 0.0 if none; its mean over queries is the MRR."""
    rel = _check(relevant, k)
    hits = _first_hits(retrieved, rel, k)
    return 1.0 / (hits[0] + 1) if hits else 0.0


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean; NaN for no values (same convention as :func:`percentile`)."""
    items = list(values)
    return math.fsum(items) / len(items) if items else math.nan


def percentile(values: Iterable[float], p: float) -> float:
    """The ``p``-th percentile (0..100) with linear interpolation between
    closest ranks (numpy's default method).

    No values give NaN: "no measurement" must not read as a latency of 0.
    """
    if not 0 <= p <= 100 or math.isnan(p):
        raise InvalidInputError(f"p must be within [0, 100], got {p}")
    data = sorted(values)
    if not data:
        return math.nan
    pos = (len(data) - 1) * p / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    frac = pos - lo
    return data[lo] + (data[hi] - data[lo]) * frac
