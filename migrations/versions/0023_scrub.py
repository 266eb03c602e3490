"""Scrub endpoint credentials that older versions recorded

Before this version a password in an endpoint URL (``llm_base_url``,
``embed_base_url``) was written into the store: failed runs quoted the URL
(the ``pipeline.run_failed`` events' ``error``, ``derive_failures``,
``pipeline_queue.last_error``, ``vector_quarantine.error``), and the
embedding model id, which names a vector space, held the endpoint's
``user:password@``. This one-time rewrite masks every credential in those
events and rows with the same rule the code now applies before anything is
recorded (``memstore.redact``), and renames vector spaces and cached
embeddings to the endpoint without credentials, so a later password
rotation keeps the vectors.

Rewriting events is the one exception to "events are immutable" that
erasure also uses: the rows keep their position, id and every other field;
only the credential text changes, and the projections that copy it
(``derive_failures``) are scrubbed with the same function, so a rebuild gives
the same state. When anything changed, the erasure compaction marker is set:
the next open vacuums the file (and truncates the WAL), so the old text does
not linger in free pages.

Downgrade changes nothing: the credentials are gone on purpose.

Revision ID: 0023_scrub
Revises: 0021_capture
Create Date: 2026-12-04
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0023_scrub"
down_revision: str | None = "0022_forget"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")

# -- copied from memstore/redact.py at this revision (migrations never import live code)

_MASK = "***"
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<info>[^/?#\s'\"<>()\[\]]*)@")
_SECRET_PARAM = re.compile(
    r"(?P<name>\b(?:password|passwd|pwd|api[_-]?key|apikey|access[_-]?token|token|secret|"
    r"client[_-]?secret|sig|signature|key)=)(?P<value>[^&\s'\"#]+)",
    re.IGNORECASE,
)


def _masked(m: re.Match[str]) -> str:
    user, colon, _ = m["info"].partition(":")
    return f"{m['scheme']}{user}:{_MASK}@" if colon else f"{m['scheme']}{_MASK}@"


def _redact(text: str) -> str:
    if "@" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(_masked, text)
    if "://" in text or "?" in text:
        text = _SECRET_PARAM.sub(lambda m: f"{m['name']}{_MASK}", text)
    return text


# -- the event payload format at this revision (memstore/events/log.py): compact
# JSON, an object or an array per payload, non-ASCII kept as is.

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _scrub_json(value: Any) -> Any:
    if isinstance(value, str):
        return _redact(value)
    if isinstance(value, list):
        return [_scrub_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_json(v) for k, v in value.items()}
    return value


def _model_id(model_id: str) -> str:
    """``openai:user:pw@host:port/model@dims`` -> ``openai:host:port/model@dims``
    (the remote embedder's id: ``openai:`` + the endpoint's netloc + ``/`` + model)."""
    if not model_id.startswith("openai:"):
        return model_id
    netloc, slash, rest = model_id[len("openai:") :].partition("/")
    return f"openai:{netloc.rpartition('@')[2]}{slash}{rest}"


def _tables(conn: sa.Connection) -> set[str]:
    return set(sa.inspect(conn).get_table_names())


def _scrub_events(conn: sa.Connection) -> int:
    changed = 0
    rows = conn.execute(
        sa.text("SELECT position, payload FROM events WHERE type = 'pipeline.run_failed'")
    ).all()
    for position, payload in rows:
        clean = _dumps(_scrub_json(json.loads(payload)))
        if clean != payload:
            conn.execute(
                sa.text("UPDATE events SET payload = :p WHERE position = :pos"),
                {"p": clean, "pos": position},
            )
            changed += 1
    return changed


def _scrub_column(conn: sa.Connection, table: str, column: str, keys: Sequence[str]) -> int:
    changed = 0
    cols = ", ".join(keys)
    rows = conn.execute(
        sa.text(f"SELECT {cols}, {column} FROM {table} WHERE {column} IS NOT NULL")
    ).all()
    for row in rows:
        value = row[-1]
        clean = _redact(value)
        if clean != value:
            where = " AND ".join(f"{k} = :k{i}" for i, k in enumerate(keys))
            params = {f"k{i}": row[i] for i in range(len(keys))}
            conn.execute(
                sa.text(f"UPDATE {table} SET {column} = :v WHERE {where}"), {"v": clean, **params}
            )
            changed += 1
    return changed


def _scrub_spaces(conn: sa.Connection, tables: set[str]) -> int:
    changed = 0
    rows = conn.execute(sa.text("SELECT name, kind, model_id, table_name FROM vector_spaces")).all()
    for name, kind, model_id, table_name in rows:
        clean = _model_id(model_id)
        if clean == model_id:
            continue
        changed += 1
        new_name = f"{kind}:{clean}"
        taken = conn.execute(
            sa.text("SELECT 1 FROM vector_spaces WHERE name = :n"), {"n": new_name}
        ).first()
        if taken is not None:
            # The same endpoint under another password already has its space:
            # keep that one, drop this copy (it re-embeds nothing the other has).
            conn.execute(sa.text("DELETE FROM vector_spaces WHERE name = :n"), {"n": name})
            for dependent in ("vector_index", "vector_quarantine"):
                if dependent in tables:
                    conn.execute(sa.text(f"DELETE FROM {dependent} WHERE space = :n"), {"n": name})
            if table_name in tables:
                conn.execute(sa.text(f'DROP TABLE "{table_name}"'))
            continue
        conn.execute(
            sa.text("UPDATE vector_spaces SET name = :new, model_id = :m WHERE name = :old"),
            {"new": new_name, "m": clean, "old": name},
        )
        for dependent in ("vector_index", "vector_quarantine"):
            if dependent in tables:
                conn.execute(
                    sa.text(f"UPDATE {dependent} SET space = :new WHERE space = :old"),
                    {"new": new_name, "old": name},
                )
    return changed


def _scrub_cache(conn: sa.Connection) -> int:
    changed = 0
    ids = [r[0] for r in conn.execute(sa.text("SELECT DISTINCT model_id FROM embedding_cache"))]
    for model_id in ids:
        clean = _model_id(model_id)
        if clean == model_id:
            continue
        # A text cached under both ids keeps the clean one.
        conn.execute(
            sa.text(
                "DELETE FROM embedding_cache WHERE model_id = :old AND content_hash IN "
                "(SELECT content_hash FROM embedding_cache WHERE model_id = :new)"
            ),
            {"old": model_id, "new": clean},
        )
        changed += (
            conn.execute(
                sa.text("UPDATE embedding_cache SET model_id = :new WHERE model_id = :old"),
                {"new": clean, "old": model_id},
            ).rowcount
            or 0
        )
    return changed


def upgrade() -> None:
    conn = op.get_bind()
    tables = _tables(conn)
    counts: dict[str, int] = {}
    if "events" in tables:
        counts["events"] = _scrub_events(conn)
    for table, column, keys in (
        ("derive_failures", "last_error", ("user_id", "stage", "session_id", "generation")),
        ("pipeline_queue", "last_error", ("id",)),
        ("vector_quarantine", "error", ("space", "source_id")),
    ):
        if table in tables:
            counts[table] = _scrub_column(conn, table, column, keys)
    if "vector_spaces" in tables:
        counts["vector_spaces"] = _scrub_spaces(conn, tables)
    if "embedding_cache" in tables:
        counts["embedding_cache"] = _scrub_cache(conn)
    if any(counts.values()):
        log.info(
            "scrubbed endpoint credentials: %s",
            ", ".join(f"{n} {t}" for t, n in counts.items() if n),
        )
        _mark_compaction(conn, tables)


def _mark_compaction(conn: sa.Connection, tables: set[str]) -> None:
    """Ask the next open to vacuum: the old text is still in free pages."""
    if "erasure_compaction" not in tables:
        return
    if conn.execute(sa.text("SELECT 1 FROM erasure_compaction")).first() is not None:
        return  # one is pending already; it vacuums after this rewrite too
    head = conn.execute(sa.text("SELECT COALESCE(MAX(position), 0) FROM events")).scalar()
    conn.execute(
        sa.text(
            "INSERT INTO erasure_compaction (id, requested_at, tombstone_position, vacuumed) "
            "VALUES (1, :at, :pos, 0)"
        ),
        {"at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "pos": int(head or 0)},
    )


def downgrade() -> None:
    # The credentials are gone on purpose; the rows stay as scrubbed.
    pass
