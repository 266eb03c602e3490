"""Row-by-row snapshots of every projection table, for rebuild-equality checks.

In the package (not under ``tests/``) because ``memstore bench chaos`` compares
them too, and it must run from an installed wheel."""

from __future__ import annotations

from typing import Any

from sqlalchemy import inspect, text

from memstore.store import Store

__all__ = ["FTS_TABLES", "NOT_PROJECTIONS", "snapshot"]

# Caches and bookkeeping that are not projections of the log.
NOT_PROJECTIONS = {
    "events",
    "alembic_version",
    "projection_checkpoints",
    "embedding_cache",
    "vector_spaces",
    "vector_index",
}
FTS_TABLES = ("l0_fts", "l1_fts")


def snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    with store.internals.db.read() as conn:
        names = inspect(conn).get_table_names()
        for name in names:
            if name in NOT_PROJECTIONS or name.startswith(("vec_", "apscheduler", "sqlite_")):
                continue
            if name.startswith(FTS_TABLES):
                continue  # shadow tables; the FTS content is compared below
            rows = conn.execute(text(f'SELECT * FROM "{name}"')).all()
            out[name] = sorted((tuple(r) for r in rows), key=repr)
        for fts in FTS_TABLES:
            if fts in names:
                rows = conn.execute(text(f"SELECT rowid, text, cjk FROM {fts}")).all()
                out[fts] = sorted(tuple(r) for r in rows)
    return out
