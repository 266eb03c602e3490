"""Programmatic Alembic: upgrade on open, downgrade, current revision.

The migrations live in the repository's ``migrations/`` folder and are
installed as ``memstore._migrations``; both layouts are found here, so an
editable checkout and a wheel behave the same.
"""

from __future__ import annotations

import io
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from memstore.db.engine import Database
from memstore.errors import MigrationError


def migrations_dir() -> Path:
    try:
        import memstore._migrations as pkg  # type: ignore[import-not-found,unused-ignore]

        return Path(pkg.__file__).parent
    except ImportError:
        here = Path(__file__).resolve().parents[2] / "migrations"
        if (here / "env.py").is_file():
            return here
        raise MigrationError(
            "memstore's migrations are missing from this installation "
            "(expected package memstore._migrations)"
        ) from None


def _config() -> Config:
    cfg = Config(stdout=io.StringIO())
    cfg.set_main_option("script_location", str(migrations_dir()))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    if head is None:
        raise MigrationError("no migration revisions found")
    return head


def current_revision(db: Database) -> str | None:
    with db.read() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(db: Database, revision: str = "head") -> None:
    _run(db, "upgrade", revision)


def downgrade(db: Database, revision: str) -> None:
    _run(db, "downgrade", revision)


def _run(db: Database, action: str, revision: str) -> None:
    cfg = _config()
    try:
        with db.write() as conn:
            cfg.attributes["connection"] = conn
            if action == "upgrade":
                command.upgrade(cfg, revision)
            else:
                command.downgrade(cfg, revision)
    except MigrationError:
        raise
    except Exception as exc:  # alembic raises CommandError, driver errors, KeyError...
        raise MigrationError(f"{action} to {revision} failed: {exc}") from exc


def ensure_current(db: Database, *, upgrade_schema: bool = True) -> str:
    """Bring a database to head, or check it is at head when upgrades are off."""
    head = head_revision()
    cur = current_revision(db)
    if cur == head:
        return head
    if not upgrade_schema:
        raise MigrationError(
            f"database {db.path} is at revision {cur or 'none (empty)'}, this memstore "
            f"needs {head}; run `memstore db upgrade --db {db.path}`"
        )
    script = ScriptDirectory.from_config(_config())
    if cur is not None:
        try:
            script.get_revision(cur)
        except Exception as exc:
            raise MigrationError(
                f"database {db.path} is at revision {cur}, unknown to this memstore "
                "(written by a newer version?)"
            ) from exc
    upgrade(db, "head")
    return head
