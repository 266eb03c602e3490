"""Recording an upstream data directory as memstore events.

L0 messages are captured with their own ids and times. The upstream's L1
records, scene blocks and persona become derivation events whose deriver is
``import`` (model ``tencentdb-agent-memory``): outcomes with provenance, so a
rebuild replays them exactly, and ``memstore rederive`` can derive the same
conversations again with memstore's own pipeline into a new generation.

The imported conversations count as extracted (the upstream's records are
their outcome); otherwise the pipeline would extract them a second time.

Ids are derived from (user, upstream id), so re-running an import appends
nothing for what is unchanged: a changed record becomes an ``update``, a
changed scene is replaced, a changed persona is recorded again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from memstore.db.schema import events as events_t
from memstore.db.schema import l1_memories
from memstore.derive.events import L1Extracted, PersonaUpdated, ScenesUpdated
from memstore.derive.messages.events import MessagesCaptured, l0_stream
from memstore.derive.queries import active_generation, persona, scenes
from memstore.derive.runs import append_checked, new_id
from memstore.errors import InvalidInputError
from memstore.porting.erased import Erased
from memstore.porting.report import ImportReport, strict_id
from memstore.porting.upstream import Record, UpstreamData

if TYPE_CHECKING:
    from memstore.store import Store

DERIVER = "import"
MODEL = "tencentdb-agent-memory"
_NS = uuid.UUID("6f1c2a52-4c7e-4e53-9d0b-6a8f3a1d2e41")
CHUNK = 200


def stable_id(user_id: str, kind: str, upstream_id: str) -> str:
    return uuid.uuid5(_NS, f"{user_id}\x1f{kind}\x1f{upstream_id}").hex


def import_upstream(
    store: Store,
    data: UpstreamData,
    user_id: str,
    report: ImportReport,
    progress: Callable[[int], None] | None = None,
    erased: Erased | None = None,
) -> None:
    """Import ``data`` into ``user_id``; refused (``InvalidInputError``,
    nothing imported) for an erased user unless ``erased`` allows it."""
    user_id = strict_id("user_id", user_id)
    why = (erased if erased is not None else Erased(store)).covers(user_id)
    if why is not None:
        raise InvalidInputError(why)
    tick = progress or (lambda n: None)
    run_id = new_id()
    new_l0 = _import_messages(store, data, user_id, report, tick)
    mem_ids = _import_records(store, data, user_id, run_id, new_l0, report, tick)
    _import_scenes(store, data, user_id, run_id, mem_ids, report, tick)
    _import_persona(store, data, user_id, run_id, report)
    tick(1)


def _import_messages(
    store: Store,
    data: UpstreamData,
    user_id: str,
    report: ImportReport,
    tick: Callable[[int], None],
) -> dict[str, list[str]]:
    """Capture each session's messages in time order; returns the ids stored
    now, per session."""
    by_session: dict[str, list[Any]] = {}
    for m in data.messages:
        by_session.setdefault(m.session_key, []).append(m)
    stored: dict[str, list[str]] = {}
    for session, msgs in by_session.items():
        msgs.sort(key=lambda m: m.timestamp)
        for start in range(0, len(msgs), CHUNK):
            chunk = msgs[start : start + CHUNK]
            try:
                res = store.capture(
                    user_id,
                    session,
                    [
                        {"id": m.id, "role": m.role, "content": m.content, "timestamp": m.timestamp}
                        for m in chunk
                    ],
                )
            except InvalidInputError as exc:  # e.g. one id on two different messages
                report.problem(f"conversations/ (session {session})", str(exc))
                tick(len(chunk))
                continue
            if res.stored:
                stored.setdefault(session, []).extend(res.stored)
            report.add("messages stored", len(res.stored))
            report.add("messages already known", len(res.duplicates))
            tick(len(chunk))
    return stored


def _last_capture(store: Store, user_id: str, session: str) -> int:
    with store.internals.db.read() as conn:
        got = conn.execute(
            select(func.max(events_t.c.position)).where(
                events_t.c.stream == l0_stream(user_id, session),
                events_t.c.type == MessagesCaptured.TYPE,
            )
        ).scalar_one_or_none()
    return int(got or 0)


def _decision(user_id: str, r: Record, existing: Any) -> dict[str, Any] | None:
    mid = stable_id(user_id, "record", r.id)
    if existing is not None:
        same = (existing.content, existing.type, int(existing.priority), existing.scene_name) == (
            r.content, r.type, r.priority, r.scene_name,
        )  # fmt: skip
        if same or existing.status != "active":
            return None
    return {
        "action": "update" if existing is not None else "store",
        "new_id": mid if existing is None else new_id(),
        "target_ids": [mid] if existing is not None else [],
        "content": r.content,
        "type": r.type,
        "priority": r.priority,
        "scene_name": r.scene_name,
        "source_message_ids": r.source_message_ids,
        "activity_start": r.activity_start,
        "activity_end": r.activity_end,
        "occurred_at": r.updated_at,
        "candidate": r.content,
        "reason": f"imported upstream record {r.id} ({r.where})",
        "degraded_from": None,
    }


def _import_records(
    store: Store,
    data: UpstreamData,
    user_id: str,
    run_id: str,
    new_l0: dict[str, list[str]],
    report: ImportReport,
    tick: Callable[[int], None],
) -> dict[str, list[str]]:
    """One extraction event per session; returns memory ids by scene name."""
    with store.internals.db.read() as conn:
        gen = active_generation(conn, user_id)
        rows = {
            r.memory_id: r
            for r in conn.execute(select(l1_memories).where(l1_memories.c.user_id == user_id))
        }
    decisions: dict[str, list[dict[str, Any]]] = {s: [] for s in new_l0}
    by_scene: dict[str, list[str]] = {}
    for r in data.records:
        mid = stable_id(user_id, "record", r.id)
        by_scene.setdefault(_scene_key(r.scene_name), []).append(mid)
        d = _decision(user_id, r, rows.get(mid))
        tick(1)
        if d is None:
            report.add("memories already imported")
            continue
        decisions.setdefault(r.session_key or "upstream-import", []).append(d)
        report.add("memories updated" if d["action"] == "update" else "memories imported")
    for session, ds in decisions.items():
        event = L1Extracted(
            session_id=session,
            run_id=run_id,
            generation=gen,
            deriver=DERIVER,
            model=MODEL,
            prompt_version="records",
            cursor_position=_last_capture(store, user_id, session),
            message_ids=new_l0.get(session, []),
            decisions=ds,
        )
        append_checked(store.internals.derivation, user_id, [event])
    return by_scene


def _scene_key(name: str) -> str:
    return " ".join(name.replace("_", " ").lower().split())


def _import_scenes(
    store: Store,
    data: UpstreamData,
    user_id: str,
    run_id: str,
    mem_ids: dict[str, list[str]],
    report: ImportReport,
    tick: Callable[[int], None],
) -> None:
    with store.internals.db.read() as conn:
        gen = active_generation(conn, user_id)
        current = {s["scene_id"]: s for s in scenes(conn, user_id, gen)}
        cursor = conn.execute(
            select(func.coalesce(func.max(l1_memories.c.updated_position), 0)).where(
                l1_memories.c.user_id == user_id
            )
        ).scalar_one()
    ops: list[dict[str, Any]] = []
    for s in data.scenes:
        tick(1)
        sid = stable_id(user_id, "scene", s.filename)
        op = {
            "op": "create", "scene_id": sid, "source_scene_ids": [], "name": s.name,
            "summary": s.summary, "body": s.body, "heat": max(1, s.heat),
            "memory_ids": mem_ids.get(_scene_key(s.name), []),
        }  # fmt: skip
        old = current.get(sid)
        if old is not None:
            if (old["name"], old["summary"], old["body"], int(old["heat"])) == (
                s.name, s.summary, s.body, max(1, s.heat),
            ):  # fmt: skip
                report.add("scenes already imported")
                continue
            ops.append({**op, "op": "delete", "memory_ids": []})
        ops.append(op)
        report.add("scenes imported")
    if ops:
        event = ScenesUpdated(
            run_id=run_id,
            generation=gen,
            deriver=DERIVER,
            model=MODEL,
            prompt_version="scene_blocks",
            memory_cursor=int(cursor),
            memory_ids=[m for ids in mem_ids.values() for m in ids],
            operations=ops,
            notes=[f"imported from {data.root}"],
        )
        append_checked(store.internals.derivation, user_id, [event])


def _import_persona(
    store: Store, data: UpstreamData, user_id: str, run_id: str, report: ImportReport
) -> None:
    if data.persona is None:
        return
    with store.internals.db.read() as conn:
        gen = active_generation(conn, user_id)
        row = persona(conn, user_id, gen)
        scene_ids = [s["scene_id"] for s in scenes(conn, user_id, gen)]
    if row is not None and str(row["persona"]) == data.persona:
        report.add("persona already imported")
        return
    event = PersonaUpdated(
        run_id=run_id,
        generation=gen,
        deriver=DERIVER,
        model=MODEL,
        prompt_version="persona.md",
        persona=data.persona,
        trigger="import",
        scene_ids=scene_ids,
    )
    append_checked(store.internals.derivation, user_id, [event])
    report.add("persona imported")


__all__ = ["DERIVER", "MODEL", "import_upstream", "stable_id"]
