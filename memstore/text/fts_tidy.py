"""Keep the FTS5 indexes in few segments, in small background steps.

Every write transaction that adds rows to an FTS5 table leaves a new index
segment, and FTS5's own merging (``automerge``: four segments of a level
make one of the next) lets them pile up: 15 on average, 23 at most, over
20k one-row transactions (the one-turn captures a host makes). Keyword
search runs one MATCH per query term (memstore.search.bm25) and every MATCH
probes every segment; on a store of 100 users x 1k messages the MATCHes of a
query cost 1.38 ms CPU with 9 segments and 0.37 ms with one
(BENCHMARKS.md, "Keyword search per user").

:func:`tidy` asks FTS5 to merge each level that holds two or more segments
(its ``'merge'`` command with ``usermerge = 2``), a few pages per write
transaction, so a capture queued behind it waits for one short step. The
background indexer calls it once it has nothing left to embed. Merging the
whole index into one segment (``'optimize'``, or ``'merge'`` with a negative
budget) would rewrite every posting each time, which grows with the store;
this keeps the work proportional to what was written (about 4 segments on
average in the same 20k-transaction run).

Only where the backend's index has segments (``Backend.merges_fts``):
PostgreSQL's GIN indexes have none.
"""

from __future__ import annotations

from collections.abc import Callable

from memstore.db.engine import Database

__all__ = ["PAGES", "TABLES", "USERMERGE", "tidy"]

TABLES = ("l0_fts", "l1_fts")
PAGES = 8
"""Leaf pages written per step (FTS5 pages are about 4 KB): a step holds the
write lock for a few milliseconds."""
USERMERGE = 2
"""Segments on one level that make ``'merge'`` merge them (FTS5's default is 4,
the same as its automerge, which would leave the pile as it is)."""


def tidy(
    db: Database,
    *,
    pages: int = PAGES,
    should_stop: Callable[[], bool] | None = None,
    max_steps: int = 10_000,
) -> int:
    """Merge the FTS5 tables' crowded levels, ``pages`` pages per write
    transaction, until FTS5 has nothing left to merge (or ``should_stop``).
    Returns the number of steps that did work."""
    if not db.backend.merges_fts:
        return 0
    steps = 0
    for table in TABLES:
        while steps < max_steps and not (should_stop and should_stop()):
            with db.write() as conn:
                worked = db.backend.fts_merge_step(conn, table, pages, USERMERGE)
            if not worked:
                break
            steps += 1
    return steps
