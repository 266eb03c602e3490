"""Programmatic Alembic: upgrade on open, downgrade, current revision.

The migrations live in the repository's ``migrations/`` folder and are
installed as ``memstore._migrations``; both layouts are found here, so an
editable checkout and a wheel behave the same.

Every migration runs in one transaction. A downgrade that would drop a table
holding data the log cannot give back (the log itself) is refused unless
confirmed; after any step, projections whose tables changed lose their
checkpoint, so the next ``Store.open`` rebuilds them from the log.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Table, text

from memstore.db.engine import Database
from memstore.db.revision import migrations_dir
from memstore.errors import MigrationError


class TableOwner(Protocol):
    """A projection as far as migrations care: its name and its tables."""

    @property
    def name(self) -> str: ...

    @property
    def tables(self) -> Sequence[Table]: ...


def _config() -> Config:
    cfg = Config(stdout=io.StringIO())
    cfg.set_main_option("script_location", str(migrations_dir()))
    return cfg


@functools.cache
def head_revision() -> str:
    """The newest revision this memstore ships. Read once per process: finding
    it loads and compiles every revision file (~8 ms of each Store.open), and
    the files do not change under a running process."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    if head is None:
        raise MigrationError("no migration revisions found")
    return head


def current_revision(db: Database) -> str | None:
    with db.read() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(db: Database, revision: str = "head", *, owners: Mapping[str, str]) -> list[str]:
    """Upgrade; returns the projections marked stale (rebuilt on next open).

    ``owners`` maps each projection table to its projection (``projection_tables``)."""
    return _run(db, "upgrade", revision, owners=owners)


def downgrade(
    db: Database,
    revision: str,
    *,
    owners: Mapping[str, str],
    allow_data_loss: bool = False,
) -> list[str]:
    """Downgrade; refuses (``MigrationError``, nothing changed) to drop a table
    with rows that cannot be rebuilt from the log — the log itself above all —
    unless ``allow_data_loss`` (projection tables, ``owners``, can be rebuilt).
    Returns the projections marked stale."""
    return _run(db, "downgrade", revision, allow_data_loss=allow_data_loss, owners=owners)


def _run(
    db: Database,
    action: str,
    revision: str,
    *,
    owners: Mapping[str, str],
    allow_data_loss: bool = False,
) -> list[str]:
    cfg = _config()
    try:
        # One transaction (SQLite DDL is transactional): a refused downgrade
        # leaves the file exactly as it was.
        with db.write() as conn:
            before = _schema(conn)
            kept = _row_counts(conn, before, owners) if action == "downgrade" else {}
            cfg.attributes["connection"] = conn
            if action == "upgrade":
                command.upgrade(cfg, revision)
            else:
                command.downgrade(cfg, revision)
            after = _schema(conn)
            lost = {t: n for t, n in kept.items() if n and t not in after}
            if lost and not allow_data_loss:
                what = ", ".join(f"{t} ({n} rows)" for t, n in sorted(lost.items()))
                raise MigrationError(
                    f"downgrade to {revision} would delete data that cannot be rebuilt: "
                    f"{what}; nothing was changed. Back up {db.location} and confirm with "
                    "`memstore db downgrade --yes` to go ahead"
                )
            changed = {t for t in before.keys() | after.keys() if before.get(t) != after.get(t)}
            return _mark_stale(conn, changed, after, owners)
    except MigrationError:
        raise
    except Exception as exc:  # alembic raises CommandError, driver errors, KeyError...
        raise MigrationError(f"{action} to {revision} failed: {exc}") from exc


def _schema(conn: Connection) -> dict[str, str]:
    """Each table's DDL with its indexes': what a migration step changes."""
    out: dict[str, list[str]] = {}
    if conn.dialect.name == "postgresql":
        return _schema_pg(conn)
    for tbl, sql in conn.exec_driver_sql(
        "SELECT tbl_name, coalesce(sql, '') FROM sqlite_master "
        "WHERE type IN ('table', 'index') ORDER BY tbl_name, type, name"
    ):
        out.setdefault(str(tbl), []).append(str(sql))
    return {t: "\n".join(s) for t, s in out.items()}


def _schema_pg(conn: Connection) -> dict[str, str]:
    """PostgreSQL has no stored DDL: each table's columns and index definitions."""
    out: dict[str, list[str]] = {}
    for tbl, line in conn.execute(
        text(
            "SELECT table_name, column_name || ' ' || data_type || ' ' || is_nullable || ' ' "
            "|| coalesce(column_default, '') || ' ' || coalesce(generation_expression, '') "
            "FROM information_schema.columns WHERE table_schema = current_schema() "
            "UNION ALL SELECT tablename, indexdef FROM pg_indexes "
            "WHERE schemaname = current_schema() ORDER BY 1, 2"
        )
    ):
        out.setdefault(str(tbl), []).append(str(line))
    return {t: "\n".join(s) for t, s in out.items()}


def projection_tables(projections: Iterable[TableOwner]) -> dict[str, str]:
    """Table -> the projection that fills it (replaying the log restores it).

    The caller names the projections (``memstore.store.default_projections``):
    the database layer sits below them and must not import them."""
    out: dict[str, str] = {}
    for p in projections:
        for t in p.tables:
            out[t.name] = p.name
    for fts, source in _FTS_SOURCES.items():
        if source in out:
            out[fts] = out[source]
    return out


# Full-text tables are filled with their source table; vec0 and FTS5 also
# keep shadow tables named after themselves.
_FTS_SOURCES = {"l0_fts": "l0_messages", "l1_fts": "l1_memories"}
# Caches and bookkeeping: refilled by the indexer, the reconciler or a rebuild.
_REBUILDABLE = frozenset(
    {
        "alembic_version",
        "projection_checkpoints",
        "l0_keyword_cursor",
        "embedding_cache",
        "vector_spaces",
        "vector_index",
        "vector_quarantine",
        "pipeline_locks",
        "pipeline_queue",
        "apscheduler_jobs",
    }
)


def _owner_table(table: str, known: Mapping[str, str]) -> str | None:
    for name in known:
        if table == name or table.startswith(f"{name}_"):
            return name
    return None


def _rebuildable(table: str, projection_tables: Mapping[str, str]) -> bool:
    return (
        table in _REBUILDABLE
        or table.startswith(("vec_", "sqlite_"))
        or _owner_table(table, projection_tables) is not None
    )


def _row_counts(
    conn: Connection, schema: dict[str, str], proj: Mapping[str, str]
) -> dict[str, int]:
    """Rows of every table a downgrade could lose for good."""
    return {
        t: int(conn.exec_driver_sql(f'SELECT count(*) FROM "{t}"').scalar_one())
        for t in schema
        if not _rebuildable(t, proj)
    }


def _mark_stale(
    conn: Connection, changed: set[str], schema: dict[str, str], proj: Mapping[str, str]
) -> list[str]:
    """Forget the checkpoint of every projection whose tables the migration
    touched: ``Store.open`` then rebuilds it from the log, and ``projections
    status`` shows it behind meanwhile (never "lag 0" over empty tables)."""
    if "projection_checkpoints" not in schema or not changed:
        return []
    stale = sorted({proj[o] for t in changed if (o := _owner_table(t, proj)) is not None})
    for name in stale:
        conn.execute(text("DELETE FROM projection_checkpoints WHERE name = :n"), {"n": name})
    return stale


def ensure_current(db: Database, *, owners: Mapping[str, str], upgrade_schema: bool = True) -> str:
    """Bring a database to head, or check it is at head when upgrades are off."""
    head = head_revision()
    cur = current_revision(db)
    if cur == head:
        return head
    if not upgrade_schema:
        raise MigrationError(
            f"database {db.location} is at revision {cur or 'none (empty)'}, this memstore "
            f"needs {head}; run `memstore db upgrade --db {db.location}`"
        )
    script = ScriptDirectory.from_config(_config())
    if cur is not None:
        try:
            script.get_revision(cur)
        except Exception as exc:
            raise MigrationError(
                f"database {db.location} is at revision {cur}, unknown to this memstore "
                "(written by a newer version?)"
            ) from exc
    upgrade(db, "head", owners=owners)
    return head
