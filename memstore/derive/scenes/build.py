"""L2: fold new and changed L1 memories into the user's scene blocks.

The run covers the memories whose ``updated_position`` is past the user's
scene cursor, in chunks of whole log positions (so the cursor is exact), and
records one ``l2.scenes_updated`` event per chunk with the operations' final
text and the ids of scenes it creates.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from memstore.derive.events import ScenesUpdated
from memstore.derive.memories.rules import RULES_VERSION
from memstore.derive.prompts import (
    SCENE_PROMPT_VERSION,
    SceneResult,
    SceneView,
    build_scene_prompt,
    validate_scenes,
)
from memstore.derive.queries import (
    active_generation,
    memories_by_id,
    memories_changed_since,
    scene_state,
    scenes,
)
from memstore.derive.runs import RunOutcome, append_checked, llm_client, new_id, record_failure
from memstore.derive.scenes import rules as scene_rules
from memstore.errors import LLMError
from memstore.llm.client import LLMClient
from memstore.logtext import debug_detail, loggable

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

log = logging.getLogger("memstore.derive")

L2_BATCH = 30  # memories per scene prompt: keeps the prompt (and its answer) bounded


def _chunks(changed: Sequence[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = []
    for m in changed:
        if (
            out
            and len(out[-1]) >= size
            and out[-1][-1]["updated_position"] != m["updated_position"]
        ):
            out.append([])
        if not out:
            out.append([])
        out[-1].append(m)
    return out


def cursor_of(conn: Connection, user_id: str, generation: int) -> int:
    st = scene_state(conn, user_id, generation)
    return int(st["memory_cursor"]) if st else 0


def _llm_ops(
    client: LLMClient,
    chunk: Sequence[dict[str, Any]],
    current: Sequence[dict[str, Any]],
    max_scenes: int,
) -> tuple[list[dict[str, Any]], bool, list[str], str]:
    views = [
        SceneView(
            s["scene_id"],
            s["name"],
            s["summary"],
            s["body"],
            int(s["heat"]),
            tuple(s["memory_ids"]),
        )
        for s in current
    ]
    new = [(m["memory_id"], m["content"], m["type"]) for m in chunk]
    system, user = build_scene_prompt(new, views, max_scenes)
    scene_ids = {s["scene_id"] for s in current}
    memory_ids = {m["memory_id"] for m in chunk}

    def check(obj: object) -> SceneResult:
        return validate_scenes(obj, scene_ids, memory_ids, max_scenes)

    res = client.complete_json(kind="l2_scenes", system=system, user=user, validate=check)
    ops = []
    for o in res.value.operations:
        sid = new_id() if o.op in ("create", "merge") else o.scene_id
        ops.append(
            {
                "op": o.op,
                "scene_id": sid,
                "source_scene_ids": list(o.source_scene_ids),
                "name": o.name,
                "summary": o.summary,
                "body": o.body,
                "memory_ids": list(o.memory_ids),
            }
        )
    return ops, res.value.persona_refresh, list(res.value.notes), res.model


def run_l2(store: DeriveContext, user_id: str) -> RunOutcome:
    """Place the user's new and changed memories into scenes (active generation)."""
    with store.db.read() as conn:
        gen = active_generation(conn, user_id)
    return run_l2_generation(store, user_id, gen)


def run_l2_generation(store: DeriveContext, user_id: str, generation: int) -> RunOutcome:
    from memstore.derive.persona.write import persona_due

    run_id = new_id()
    client = llm_client(store)
    with store.db.read() as conn:
        since = store.log.last_position(conn)
        cursor = cursor_of(conn, user_id, generation)
        changed = memories_changed_since(conn, user_id, generation, cursor)
    appended = 0
    requested = False
    for chunk in _chunks(changed, L2_BATCH):
        with store.db.read() as conn:
            current = scenes(conn, user_id, generation)
        try:
            if client is None:

                def lookup(ids: list[str]) -> dict[str, dict[str, Any]]:
                    with store.db.read() as conn:
                        found = memories_by_id(conn, user_id, ids)
                    return {k: v for k, v in found.items() if v["status"] == "active"}

                ops, refresh = scene_rules.scene_ops(
                    chunk, current, store.settings.pipeline.max_scenes, lookup
                )
                notes: list[str] = []
                model, version = "rules", RULES_VERSION
            else:
                ops, refresh, notes, model = _llm_ops(
                    client, chunk, current, store.settings.pipeline.max_scenes
                )
                version = SCENE_PROMPT_VERSION
        except LLMError as exc:
            log.warning("l2 run %s for %s failed: %s", run_id, user_id, loggable(exc))
            debug_detail(log, f"l2 run {run_id}", exc)
            failed = record_failure(store, user_id, "l2", "", run_id, exc, generation, since=since)
            return RunOutcome(
                "l2", False, run_id, appended + failed.events_appended, error=failed.error
            )
        new_cursor = max(int(m["updated_position"]) for m in chunk)
        event = ScenesUpdated(
            run_id=run_id,
            generation=generation,
            deriver="rules" if client is None else client.deriver,
            model=model,
            prompt_version=version,
            memory_cursor=new_cursor,
            memory_ids=[m["memory_id"] for m in chunk],
            operations=ops,
            persona_refresh=refresh,
            notes=notes,
        )
        expected = cursor

        def unchanged(conn: Connection, expected: int = expected) -> bool:
            return cursor_of(conn, user_id, generation) == expected

        if append_checked(store, user_id, [event], since=since, check=unchanged) is None:
            log.info("l2 run %s: %s advanced by another worker or erased", run_id, user_id)
            break
        cursor = new_cursor
        appended += 1
        requested = requested or refresh
    due = persona_due(store, user_id, generation=generation)
    return RunOutcome("l2", True, run_id, appended, persona_requested=requested or due)
