"""Forgetting: erasing a user or part of a user's data, and retention.

Each erasure deletes or rewrites events, replays the projections and makes
the deletion physical (``memstore.db.compaction``); docs/forgetting.md says
what each grain guarantees."""
