"""The L0 projection: ``l0_messages`` rows and their FTS5 index, applied inline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import Connection, delete, func, select, text

from memstore.db.schema import l0_messages
from memstore.embeddings import content_hash
from memstore.events.log import StoredEvent
from memstore.l0.capture import known_message_ids
from memstore.l0.events import MessagesCaptured
from memstore.projections.base import Projection
from memstore.text import document_columns, is_low_information, stem_text

_FTS_INSERT = text("INSERT INTO l0_fts(rowid, text, cjk, stem) VALUES (:id, :t, :c, :s)")


class L0Projection(Projection):
    name: ClassVar[str] = "l0_messages"
    version: ClassVar[int] = 2  # 2: speaker column
    handles: ClassVar[frozenset[str] | None] = frozenset({MessagesCaptured.TYPE})
    tables = (l0_messages,)

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        next_id = int(
            conn.execute(select(func.coalesce(func.max(l0_messages.c.id), 0))).scalar_one()
        )
        # Capture never appends a known id, but a log can hold one anyway (an
        # event appended directly, an older version): skip it here rather than
        # let the FTS row and the message row disagree.
        seen: set[tuple[str, str, str]] = set()
        for ev in events:
            p = ev.payload
            assert isinstance(p, MessagesCaptured)
            ids = [m["id"] for m in p.messages]
            seen |= {
                (ev.user_id, p.session_id, mid)
                for mid in known_message_ids(conn, ev.user_id, p.session_id, ids)
            }
        rows: list[dict[str, Any]] = []
        fts: list[dict[str, Any]] = []
        for ev in events:
            p = ev.payload
            assert isinstance(p, MessagesCaptured)
            for m in p.messages:
                key = (ev.user_id, p.session_id, m["id"])
                if key in seen:
                    continue
                seen.add(key)
                next_id += 1
                rows.append(
                    {
                        "id": next_id,
                        "user_id": ev.user_id,
                        "agent_id": p.agent_id,
                        "session_id": p.session_id,
                        "message_id": m["id"],
                        "role": m["role"],
                        "text": m["text"],
                        "occurred_at": m["occurred_at"],
                        "position": ev.position,
                        "content_hash": content_hash(m["text"]),
                        "speaker": m.get("name"),
                        "low_info": int(is_low_information(m["text"])),
                    }
                )
                latin, cjk = document_columns(m["text"])
                fts.append({"id": next_id, "t": latin, "c": cjk, "s": stem_text(latin)})
        if rows:
            conn.execute(l0_messages.insert(), rows)
            conn.execute(_FTS_INSERT, fts)

    def clear(self, conn: Connection) -> None:
        conn.execute(text("DELETE FROM l0_fts"))
        conn.execute(delete(l0_messages))
        # Vectors stay: replay assigns ids in log order, so each id names the
        # same message again and vector search works right after a rebuild
        # (erasure, which renumbers, moves them: spaces.carry_over).
