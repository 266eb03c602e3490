"""What a search returns: ``Hit`` rows, read for the ranked ids in one query."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Connection

from memstore.db import backend
from memstore.db.sqlfn import driver_rows, driver_sql, in_list


@dataclass(frozen=True)
class Hit:
    kind: str  # "l0" message or "l1" memory
    id: int
    ref: str  # message_id or memory_id
    text: str
    score: float
    user_id: str
    occurred_at: str
    session_id: str | None = None
    role: str | None = None
    type: str | None = None
    scene: str | None = None
    priority: int | None = None
    keyword_rank: int | None = None
    vector_rank: int | None = None
    similarity: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def message_id(self) -> str | None:
        """The message's id for a conversation hit (what ``capture`` stored), else None."""
        return self.ref if self.kind == "l0" else None

    @property
    def memory_id(self) -> str | None:
        """The memory's id for a memory hit (what ``get_memory`` takes), else None."""
        return self.ref if self.kind == "l1" else None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != {}}


L0_COLS = "m.id, m.message_id, m.text, m.user_id, m.occurred_at, m.session_id, m.role, m.low_info"
L1_COLS = (
    "m.id, m.memory_id, m.content, m.user_id, m.occurred_at, m.type, m.scene_name, m.priority, "
    "m.activity_start, m.activity_end, m.origin"
)
# Column of l0 rows read by ``read_rows``: the message is content-free
# (memstore.search.rescore).
LOW_INFO = 7

Rows = dict[int, Any]


def read_rows(conn: Connection, kind: str, user_id: str, ids: Iterable[int]) -> Rows:
    """``user_id``'s rows among ``ids`` (l0_messages or l1_memories row ids), by id.

    Conversation search reads its candidates' rows once, before ranking: the
    same read says which are content-free (``LOW_INFO``) and gives the hits
    their text, so the rows' pages are visited once per search."""
    wanted = [int(i) for i in ids]
    if not wanted:
        return {}
    marks, params = in_list(wanted)
    cols, table = (L0_COLS, "l0_messages") if kind == "l0" else (L1_COLS, "l1_memories")
    # The ~10-40 ids by primary key, the user test kept off the (user_id, ...)
    # indexes (the backend says how).
    user = backend.of(conn).by_primary_key("m.user_id")
    sql = f"SELECT {cols} FROM {table} m WHERE m.id IN ({marks}) AND {user} = ?"
    return {int(r[0]): r for r in driver_rows(conn, driver_sql(conn, sql), (*params, user_id))}


def materialise(
    conn: Connection,
    kind: str,
    user_id: str,
    ranked: Sequence[tuple[int, float]],
    kw: list[tuple[int, float]],
    vec: list[tuple[int, float]],
    rows: Rows | None = None,
) -> list[Hit]:
    """``ranked`` (row id, score) as hits, in order, with each one's place in
    the keyword list ``kw`` and the vector list ``vec`` (id, distance).
    ``rows``: rows already read by ``read_rows``; the others are read here."""
    if not ranked:
        return []
    kw_rank = {i: r for r, (i, _) in enumerate(kw, start=1)}
    vec_rank = {i: r for r, (i, _) in enumerate(vec, start=1)}
    sims = {i: 1.0 - d for i, d in vec}
    rows = dict(rows or {})
    rows.update(read_rows(conn, kind, user_id, [i for i, _ in ranked if i not in rows]))
    out: list[Hit] = []
    for i, score in ranked:
        r = rows.get(i)
        if r is None:
            continue
        common: dict[str, Any] = {
            "kind": kind,
            "id": i,
            "ref": r[1],
            "text": r[2],
            "score": round(float(score), 6),
            "user_id": r[3],
            "occurred_at": r[4],
            "keyword_rank": kw_rank.get(i),
            "vector_rank": vec_rank.get(i),
            "similarity": round(sims[i], 6) if i in sims else None,
        }
        if kind == "l0":
            out.append(Hit(**common, session_id=r[5], role=r[6]))
        else:
            extra = {
                k: v
                for k, v in (
                    ("activity_start", r[8]),
                    ("activity_end", r[9]),
                    ("origin", r[10]),
                )
                if v
            }
            out.append(Hit(**common, type=r[5], scene=r[6], priority=int(r[7]), extra=extra))
    return out
