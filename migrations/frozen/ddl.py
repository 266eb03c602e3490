"""Dialect-specific DDL for the migrations: one set of revisions, two engines.

Full-text tables keep one shape on both: ``<name>(rowid, text, cjk[, stem])``,
so the projections fill them with the same INSERT/DELETE. On SQLite that is an
FTS5 virtual table; on PostgreSQL a plain table whose generated ``tsv`` column
(``to_tsvector('simple', ...)``: no stemming or stop words of its own, as
FTS5's unicode61 — word roots come from the ``stem`` column, CJK bigrams from
``cjk``, both filled in Python the same way for both engines) carries a GIN
index.

PostgreSQL support starts at this version, so data conversions of older
revisions (renamed streams, backfilled columns) have nothing to convert there.
"""

from __future__ import annotations

from alembic import op

# FTS5's column weights in search (memstore.search.engine) are per column; on
# PostgreSQL the same columns get tsvector weights A/B/C in this order.
_WEIGHTS = ("A", "B", "C")


def is_postgres() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def _tsv(columns: tuple[str, ...]) -> str:
    parts = [
        f"setweight(to_tsvector('simple'::regconfig, coalesce({c}, '')), '{w}')"
        for c, w in zip(columns, _WEIGHTS, strict=False)
    ]
    return " || ".join(parts)


def create_fts(name: str, columns: tuple[str, ...]) -> None:
    """A full-text table ``name`` over ``columns`` (rowid = the source row's id)."""
    cols = ", ".join(columns)
    if not is_postgres():
        op.execute(
            f"CREATE VIRTUAL TABLE {name} USING fts5("
            f"{cols}, tokenize = 'unicode61 remove_diacritics 2')"
        )
        return
    defs = ", ".join(f"{c} text NOT NULL DEFAULT ''" for c in columns)
    op.execute(
        f"CREATE TABLE {name} (rowid bigint PRIMARY KEY, {defs}, "
        f"tsv tsvector GENERATED ALWAYS AS ({_tsv(columns)}) STORED)"
    )
    op.execute(f"CREATE INDEX ix_{name}_tsv ON {name} USING gin (tsv)")


def reshape_fts_pg(
    name: str, columns: tuple[str, ...], *, add: str | None = None, drop: str | None = None
) -> None:
    """PostgreSQL: add or drop a column of a full-text table in place; ``columns``
    is the new column list (the generated ``tsv`` is recomputed from it)."""
    op.execute(f"DROP INDEX IF EXISTS ix_{name}_tsv")
    op.execute(f"ALTER TABLE {name} DROP COLUMN tsv")
    if add is not None:
        op.execute(f"ALTER TABLE {name} ADD COLUMN {add} text NOT NULL DEFAULT ''")
    if drop is not None:
        op.execute(f"ALTER TABLE {name} DROP COLUMN {drop}")
    op.execute(
        f"ALTER TABLE {name} ADD COLUMN tsv tsvector GENERATED ALWAYS AS ({_tsv(columns)}) STORED"
    )
    op.execute(f"CREATE INDEX ix_{name}_tsv ON {name} USING gin (tsv)")


def drop_fts(name: str) -> None:
    op.execute(f"DROP TABLE IF EXISTS {name}")
