"""Fewer bytes per message: packed capture events, no message hash

Three things a stored message carried that nothing needed, about 270 B of
the ~2.6 KB a message cost at 100k messages captured one turn per call:

- ``l0.captured`` payloads are stored packed (``MessagesCaptured.pack``: a
  JSON array without the per-message keys, the repeated timestamp,
  ``"truncated":false`` and the size the text already gives). Existing
  payloads are rewritten so; each rewrite is decoded again and must equal
  the payload it replaces, or the migration stops and changes nothing. The
  dict form stays readable: payloads of a shape the packing does not cover
  stay dicts, and every reader (exports included) still sees the dict.
- The ``l0:`` idempotency key of a capture event is set to NULL when it is
  the key capture derived from the event itself (a hash of user, session
  and message ids), so it holds nothing the event does not; capture no
  longer writes one (it appends only messages the session lacks, read in
  its write transaction). Any other key is kept.
- ``l0_messages.content_hash`` is dropped: a hash of ``text`` that the
  indexer and erasure now compute when they need it.

The pages freed are reused by new rows; ``VACUUM`` returns them to the file
system. Dropping the column changes ``l0_messages``, so the L0 projection
is rebuilt from the log on the next open (as after any change to its table).

Downgrade unpacks the payloads, puts the derived keys back on capture events
without a key, and refills ``content_hash`` from the text.

Revision ID: 0019_storage
Revises: 0017_pgvector
Create Date: 2026-12-01
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from memstore._migrations.frozen import ddl, packing
from memstore._migrations.frozen.packing import content_hash

from memstore.errors import MigrationError

revision: str = "0019_storage"
down_revision: str | None = "0017_pgvector"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TYPE = "l0.captured"
_BATCH = 2000
_dict_json = packing.dumps


def _derived_key(user_id: str, data: dict[str, Any]) -> str:
    """The key capture gave its events before this revision (fixed here)."""
    ids = [str(m["id"]) for m in data["messages"]]
    digest = hashlib.sha256("\x1f".join([user_id, data["session_id"], *ids]).encode())
    return f"l0:{digest.hexdigest()}"


def _rewrite_events(conn: sa.Connection, *, pack: bool) -> None:
    last = 0
    while True:
        rows = conn.execute(
            sa.text(
                "SELECT position, version, user_id, payload, idempotency_key FROM events "
                "WHERE type = :t AND position > :p ORDER BY position LIMIT :n"
            ),
            {"t": _TYPE, "p": last, "n": _BATCH},
        ).all()
        if not rows:
            return
        last = int(rows[-1][0])
        updates: list[dict[str, Any]] = []
        for position, version, user, stored, stored_key in rows:
            key = stored_key
            data = json.loads(stored)
            try:
                payload = packing.decode(int(version), data)
                if pack:
                    new = packing.dumps(packing.pack(payload))
                    again = packing.decode(packing.VERSION, json.loads(new))
            except packing.PayloadError as e:
                raise MigrationError(f"event {position}: {e}") from e
            if pack:
                if again != payload:
                    raise MigrationError(
                        f"event {position}: the packed payload does not decode to the stored one"
                    )
                if key is not None and key == _derived_key(str(user), payload):
                    key = None
            else:
                new = _dict_json(payload)
                if key is None:
                    key = _derived_key(str(user), payload)
            if new != stored or key != stored_key:
                updates.append({"p": position, "v": packing.VERSION, "d": new, "k": key})
        if updates:
            conn.execute(
                sa.text(
                    "UPDATE events SET payload = :d, version = :v, idempotency_key = :k "
                    "WHERE position = :p"
                ),
                updates,
            )


def _refill_hashes(conn: sa.Connection) -> None:
    last = -1
    while True:
        rows = conn.execute(
            sa.text("SELECT id, text FROM l0_messages WHERE id > :last ORDER BY id LIMIT :n"),
            {"last": last, "n": _BATCH},
        ).all()
        if not rows:
            return
        last = int(rows[-1][0])
        conn.execute(
            sa.text("UPDATE l0_messages SET content_hash = :h WHERE id = :i"),
            [{"i": int(i), "h": content_hash(str(t))} for i, t in rows],
        )


def upgrade() -> None:
    conn = op.get_bind()
    _rewrite_events(conn, pack=True)
    op.execute("ALTER TABLE l0_messages DROP COLUMN content_hash")


def downgrade() -> None:
    conn = op.get_bind()
    op.execute("ALTER TABLE l0_messages ADD COLUMN content_hash TEXT NOT NULL DEFAULT ''")
    if ddl.is_postgres():
        op.execute("ALTER TABLE l0_messages ALTER COLUMN content_hash DROP DEFAULT")
    _refill_hashes(conn)
    _rewrite_events(conn, pack=False)
