"""Read helpers over the derivation projections (one place for the SQL)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select

from memstore.db import backend, rawexec
from memstore.db.schema import (
    active_generations,
    derive_failures,
    derive_generations,
    events,
    l0_messages,
    l1_memories,
    l2_scenes,
    l2_state,
    l3_persona,
)
from memstore.db.sqlfn import driver_rows, driver_sql, in_list
from memstore.db.sqlfn import limit as limit_sql
from memstore.derive.messages.events import ContentErased, UserErased
from memstore.validate import check_int

DEFAULT_GENERATION = 0  # a user nobody re-derived shows generation 0 (as search assumes)


@dataclass(frozen=True)
class L0Message:
    row_id: int
    message_id: str
    role: str
    text: str
    occurred_at: str
    position: int


# The readers below run on every recall (its stable part): driver-level, since
# compiling the statements cost more than running them. Every column they read
# is text or integer, so the driver's values are the ones SQLAlchemy returns.
_GENERATION = "SELECT generation FROM active_generations WHERE user_id = ?"


def active_generation(conn: Connection, user_id: str) -> int:
    rows = driver_rows(conn, driver_sql(conn, _GENERATION), (user_id,))
    return int(rows[0][0]) if rows else DEFAULT_GENERATION


def resolve_generation(conn: Connection, user_id: str, generation: int | None) -> int:
    # Checked here too: the CLI and tools reach the derivation API without
    # Store's checks, and a number past 64 bits overflows the driver.
    if generation is None:
        return active_generation(conn, user_id)
    return check_int("generation", generation)


def next_generation(conn: Connection) -> int:
    """One number for all users of a re-derive: above every generation in use."""
    highest = max(
        DEFAULT_GENERATION,
        int(
            conn.execute(select(func.coalesce(func.max(l1_memories.c.generation), 0))).scalar_one()
        ),
        int(
            conn.execute(
                select(func.coalesce(func.max(derive_generations.c.generation), 0))
            ).scalar_one()
        ),
        int(
            conn.execute(
                select(func.coalesce(func.max(active_generations.c.generation), 0))
            ).scalar_one()
        ),
    )
    return highest + 1


def generations(conn: Connection, user_id: str) -> list[dict[str, Any]]:
    active = active_generation(conn, user_id)
    started = {
        int(r.generation): dict(r._mapping)
        for r in conn.execute(
            select(derive_generations).where(derive_generations.c.user_id == user_id)
        )
    }
    counts = {
        int(g): int(n)
        for g, n in conn.execute(
            select(l1_memories.c.generation, func.count())
            .where(l1_memories.c.user_id == user_id, l1_memories.c.status == "active")
            .group_by(l1_memories.c.generation)
        )
    }
    out = []
    for g in sorted(set(started) | set(counts) | {active}):
        info = started.get(g, {})
        out.append(
            {
                "generation": g,
                "active": g == active,
                "memories": counts.get(g, 0),
                "from_layer": info.get("from_layer", "l1"),
                "activated_position": info.get("activated_position"),
                "complete": g == DEFAULT_GENERATION or info.get("activated_position") is not None,
            }
        )
    return out


# The three reads an L1 run's append makes under the write lock (with
# ``erased_since`` and ``captures_exist``): driver-level (memstore.db.rawexec),
# since building each Core statement cost more than running it, and captures
# wait for that lock.
_L1_CURSOR = (
    "SELECT cursor_position FROM l1_cursors WHERE user_id = ? AND session_id = ? AND generation = ?"
)


def l1_cursor(conn: Connection, user_id: str, session_id: str, generation: int) -> int:
    got = rawexec.scalar(conn, _L1_CURSOR, (user_id, session_id, generation))
    return int(got) if got is not None else 0


def sessions_of(conn: Connection, user_id: str) -> list[str]:
    """The user's sessions in order of their first message."""
    rows = conn.execute(
        select(l0_messages.c.session_id, func.min(l0_messages.c.id).label("first"))
        .where(l0_messages.c.user_id == user_id)
        .group_by(l0_messages.c.session_id)
        .order_by("first")
    ).all()
    return [str(r.session_id) for r in rows]


def users_with_messages(conn: Connection) -> list[str]:
    return [
        str(u)
        for u in conn.execute(
            select(l0_messages.c.user_id).distinct().order_by(l0_messages.c.user_id)
        ).scalars()
    ]


def _message(r: Any) -> L0Message:
    return L0Message(
        int(r.id), str(r.message_id), str(r.role), str(r.text), str(r.occurred_at), int(r.position)
    )


def pending_messages(
    conn: Connection, user_id: str, session_id: str, after_position: int
) -> list[L0Message]:
    rows = conn.execute(
        select(l0_messages)
        .where(
            l0_messages.c.user_id == user_id,
            l0_messages.c.session_id == session_id,
            l0_messages.c.position > after_position,
        )
        .order_by(l0_messages.c.id)
    ).all()
    return [_message(r) for r in rows]


def background_messages(
    conn: Connection, user_id: str, session_id: str, before_row: int, n: int
) -> list[L0Message]:
    if n <= 0:
        return []
    rows = conn.execute(
        select(l0_messages)
        .where(
            l0_messages.c.user_id == user_id,
            l0_messages.c.session_id == session_id,
            l0_messages.c.id < before_row,
        )
        .order_by(l0_messages.c.id.desc())
        .limit(n)
    ).all()
    return [_message(r) for r in reversed(rows)]


def memory_dict(r: Any) -> dict[str, Any]:
    return _decoded(dict(r._mapping))


def _decoded(d: dict[str, Any]) -> dict[str, Any]:
    d["source_message_ids"] = json.loads(d["source_message_ids"])
    return d


def memories(
    conn: Connection,
    user_id: str,
    generation: int,
    *,
    type: str | None = None,
    include_retired: bool = False,
) -> list[dict[str, Any]]:
    q = select(l1_memories).where(
        l1_memories.c.user_id == user_id, l1_memories.c.generation == generation
    )
    if type is not None:
        q = q.where(l1_memories.c.type == type)
    if not include_retired:
        q = q.where(l1_memories.c.status == "active")
    return [memory_dict(r) for r in conn.execute(q.order_by(l1_memories.c.id))]


def standing_instructions(
    conn: Connection, user_id: str, generation: int, limit: int
) -> list[dict[str, Any]]:
    """Active global instructions (priority -1), oldest first."""
    sql = driver_sql(conn, _STANDING + limit_sql(int(limit)))
    rows = driver_rows(conn, sql, (user_id, generation))
    return [_decoded(dict(zip(_L1_NAMES, r, strict=True))) for r in rows]


_L1_NAMES = tuple(l1_memories.c.keys())
# Driver-level (recall reads its candidates' memories on every query;
# compiling the IN clause cost more than the read). Every column is text or
# integer, so the driver's values are the ones SQLAlchemy would return.
_L1_BY_ID = f"SELECT {', '.join(_L1_NAMES)} FROM l1_memories WHERE user_id = ? AND memory_id IN "
_STANDING = (
    f"SELECT {', '.join(_L1_NAMES)} FROM l1_memories WHERE user_id = ? AND generation = ? "
    "AND status = 'active' AND type = 'instruction' AND priority < 0 ORDER BY id "
)


def memories_by_id(conn: Connection, user_id: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        sql = driver_sql(conn, _L1_BY_ID + f"({','.join('?' * len(part))})")
        for r in driver_rows(conn, sql, (user_id, *part)):
            d = _decoded(dict(zip(_L1_NAMES, r, strict=True)))
            out[str(d["memory_id"])] = d
    return out


def memory(conn: Connection, user_id: str, memory_id: str) -> dict[str, Any] | None:
    """One of ``user_id``'s memories (any generation, any status), or None."""
    r = conn.execute(
        select(l1_memories).where(
            l1_memories.c.user_id == user_id, l1_memories.c.memory_id == memory_id
        )
    ).first()
    return memory_dict(r) if r is not None else None


def fts_memories(
    conn: Connection, user_id: str, generation: int, query: str, limit: int
) -> list[tuple[str, str]]:
    """``(memory_id, content)`` of the live memories of one generation that
    match ``query`` by keyword (FTS5 or PostgreSQL full text), best first."""
    # Ranked as search ranks memories (imported here: search sits above
    # derive's read helpers).
    from memstore.search import keyword

    live = f"m.generation = {int(generation)} AND m.status = 'active'"
    found = keyword.search(conn, "l1", query, user_id, limit, l1_filter=live)
    ids = [i for i, _ in found]
    if not ids:
        return []
    by_id = {
        int(r[0]): (str(r[1]), str(r[2]))
        for r in conn.execute(
            select(l1_memories.c.id, l1_memories.c.memory_id, l1_memories.c.content).where(
                l1_memories.c.id.in_(ids)
            )
        )
    }
    return [by_id[i] for i in ids if i in by_id]


@dataclass(frozen=True)
class Forgotten:
    """A memory retired on request: its text must not be derived again from
    messages older than the request."""

    memory_id: str
    content: str
    position: int  # of the MemoryForgotten event


def forgotten_memories(conn: Connection, user_id: str) -> list[Forgotten]:
    """Every memory of the user forgotten on request, in any generation."""
    m = l1_memories.c
    rows = conn.execute(
        select(m.memory_id, m.content, m.updated_position)
        .where(m.user_id == user_id, m.status == "retired", m.retired_by == "forgotten")
        .order_by(m.updated_position, m.id)
    ).all()
    return [Forgotten(str(r.memory_id), str(r.content), int(r.updated_position)) for r in rows]


_FORGOTTEN = (
    "SELECT source_message_ids FROM l1_memories "
    "WHERE user_id = ? AND status = 'retired' AND retired_by = 'forgotten'"
)


def forgotten_sources_ahead(conn: Connection, user_id: str) -> None:
    """``forgotten_sources`` of ``user_id`` follows in this transaction: on
    PostgreSQL its read goes with the next round trip."""
    rawexec.prefetch(conn, _FORGOTTEN, (user_id,), reads=("l1_memories",))


def forgotten_sources(conn: Connection, user_id: str) -> set[str]:
    """The messages memories forgotten on request were extracted from: recall
    and conversation search leave them out (they hold the forgotten fact),
    the log keeps them until they are erased."""
    # Plain SQL on the driver: every keyword and hybrid search asks this, and
    # building the Core statement cost more than running it.
    rows = driver_rows(conn, driver_sql(conn, _FORGOTTEN), (user_id,))
    return {str(i) for (ids,) in rows for i in json.loads(ids)}


_ERASED_SINCE = (
    "SELECT position FROM events WHERE type IN (?, ?) AND position > ? AND {erased} = ? LIMIT 1"
)


def erased_since(conn: Connection, user_id: str, position: int) -> bool:
    """Was ``user_id`` erased, whole or in part, after log position
    ``position``? (A tombstone is always appended above the erased head.)"""
    erased = backend.of(conn).json_text_sql("payload", "erased_user_id")
    sql = _ERASED_SINCE.format(erased=erased)
    got = rawexec.first(conn, sql, (UserErased.TYPE, ContentErased.TYPE, position, user_id))
    return got is not None


_CAPTURES_EXIST = (
    "SELECT count(DISTINCT position) FROM l0_messages WHERE user_id = ? AND session_id = ? "
    "AND position IN ({marks})"
)


def captures_exist(conn: Connection, user_id: str, session_id: str, positions: set[int]) -> bool:
    """Are the capture events at ``positions`` still the user's (not erased)?"""
    if not positions:
        return True
    # in_list pads with the last value: a repeat changes no count of distinct values.
    marks, values = in_list(sorted(positions))
    found = rawexec.scalar(
        conn, _CAPTURES_EXIST.format(marks=marks), (user_id, session_id, *values)
    )
    return int(found) == len(positions)


def memories_changed_since(
    conn: Connection, user_id: str, generation: int, cursor: int
) -> list[dict[str, Any]]:
    q = (
        select(l1_memories)
        .where(
            l1_memories.c.user_id == user_id,
            l1_memories.c.generation == generation,
            l1_memories.c.status == "active",
            l1_memories.c.updated_position > cursor,
        )
        .order_by(l1_memories.c.updated_position, l1_memories.c.id)
    )
    return [memory_dict(r) for r in conn.execute(q)]


def count_created_since(conn: Connection, user_id: str, generation: int, position: int) -> int:
    return int(
        conn.execute(
            select(func.count()).where(
                l1_memories.c.user_id == user_id,
                l1_memories.c.generation == generation,
                l1_memories.c.created_position > position,
            )
        ).scalar_one()
    )


_L2_NAMES = tuple(l2_scenes.c.keys())
_SCENES = (
    f"SELECT {', '.join(_L2_NAMES)} FROM l2_scenes WHERE user_id = ? AND generation = ? "
    "ORDER BY heat DESC, name, scene_id"
)
_L3_NAMES = tuple(l3_persona.c.keys())
# Quoted: "trigger" is a keyword to both engines.
_PERSONA = (
    "SELECT " + ", ".join('"' + n + '"' for n in _L3_NAMES) + " FROM l3_persona "
    "WHERE user_id = ? AND generation = ?"
)


def scenes(conn: Connection, user_id: str, generation: int) -> list[dict[str, Any]]:
    """Scenes sorted by heat (hottest first), then name: the navigation order."""
    out = []
    for r in driver_rows(conn, driver_sql(conn, _SCENES), (user_id, generation)):
        d = dict(zip(_L2_NAMES, r, strict=True))
        d["memory_ids"] = json.loads(d["memory_ids"])
        d["source_memory_ids"] = json.loads(d["source_memory_ids"])
        out.append(d)
    return out


def scene_named(
    conn: Connection, user_id: str, generation: int, name: str
) -> dict[str, Any] | None:
    """One of the user's scenes by its name, with the times of the events that
    created and last changed it (None once those events were compacted away).

    The exact name wins; otherwise a case-insensitive match, because a model
    retyping a name from the navigation does not always keep its case."""
    s = l2_scenes.c
    created = select(events.c.occurred_at).where(events.c.position == s.created_position)
    updated = select(events.c.occurred_at).where(events.c.position == s.updated_position)
    q = select(
        l2_scenes,
        created.scalar_subquery().label("created_at"),
        updated.scalar_subquery().label("updated_at"),
    ).where(s.user_id == user_id, s.generation == generation)
    for match in (s.name == name, func.lower(s.name) == name.lower()):
        r = conn.execute(q.where(match).order_by(s.heat.desc(), s.scene_id).limit(1)).first()
        if r is not None:
            d = dict(r._mapping)
            d["memory_ids"] = json.loads(d["memory_ids"])
            d["source_memory_ids"] = json.loads(d["source_memory_ids"])
            return d
    return None


def scene_state(conn: Connection, user_id: str, generation: int) -> dict[str, Any] | None:
    r = conn.execute(
        select(l2_state).where(l2_state.c.user_id == user_id, l2_state.c.generation == generation)
    ).first()
    return dict(r._mapping) if r is not None else None


def persona(conn: Connection, user_id: str, generation: int) -> dict[str, Any] | None:
    rows = driver_rows(conn, driver_sql(conn, _PERSONA), (user_id, generation))
    return dict(zip(_L3_NAMES, rows[0], strict=True)) if rows else None


def failures(
    conn: Connection,
    user_id: str,
    stage: str,
    session_id: str = "",
    generation: int | None = None,
) -> int:
    """Consecutive failures of a stage in ``generation`` (default: the active one)."""
    got = conn.execute(
        select(derive_failures.c.failures).where(
            derive_failures.c.user_id == user_id,
            derive_failures.c.stage == stage,
            derive_failures.c.session_id == session_id,
            derive_failures.c.generation == resolve_generation(conn, user_id, generation),
        )
    ).scalar_one_or_none()
    return int(got) if got is not None else 0
