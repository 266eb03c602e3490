"""Where the migrations are, the newest revision they ship, and a database's
revision, read without Alembic.

``Store.open`` upgrades through Alembic (``memstore.db.migrate``), whose
import and script loading cost a short command more than its query. A
command that only reads (``memstore search``) first asks here whether the
database is already at the shipped revision, and needs no migration code
when it is. The revision files are read as text: each names its
``revision`` and ``down_revision``; the newest is the one no other names as
its ``down_revision``. Anything this does not read with certainty (a merge,
a branch, a file in another shape) answers ``None``, and the caller takes
the Alembic path, which knows.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

from sqlalchemy import Connection, inspect

from memstore.db import rawexec
from memstore.errors import MigrationError

_REVISION = re.compile(r"^revision(?:\s*:[^=\n]*)?\s*=\s*[\"']([^\"'\n]+)[\"']\s*$", re.M)
_DOWN = re.compile(r"^down_revision(?:\s*:[^=\n]*)?\s*=\s*(?:None|[\"']([^\"'\n]+)[\"'])\s*$", re.M)


def migrations_dir() -> Path:
    # Located, not imported: the migrations import the schema from here, and
    # their folder is all this needs.
    spec = importlib.util.find_spec("memstore._migrations")
    if spec is not None and spec.origin is not None:
        return Path(spec.origin).parent
    here = Path(__file__).resolve().parents[2] / "migrations"
    if (here / "env.py").is_file():
        return here
    raise MigrationError(
        "memstore's migrations are missing from this installation "
        "(expected package memstore._migrations)"
    )


@functools.cache
def shipped_head() -> str | None:
    """The newest revision the migration files name, or None when they do
    not name exactly one without doubt (``migrate.head_revision`` decides)."""
    revisions: dict[str, str | None] = {}
    for f in sorted((migrations_dir() / "versions").glob("*.py")):
        source = f.read_text(encoding="utf-8")
        rev, down = _REVISION.findall(source), _DOWN.findall(source)
        if len(rev) != 1 or len(down) != 1 or rev[0] in revisions:
            return None
        revisions[rev[0]] = down[0] or None
    named = set(revisions.values())
    heads = [r for r in revisions if r not in named]
    return heads[0] if len(heads) == 1 else None


def stored_revision(conn: Connection) -> str | None:
    """The revision Alembic recorded in this database (None: none, or not
    exactly one row, as in a database Alembic never upgraded)."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    got = rawexec.rows(conn, "SELECT version_num FROM alembic_version")
    return str(got[0][0]) if len(got) == 1 else None


__all__ = ["migrations_dir", "shipped_head", "stored_revision"]
