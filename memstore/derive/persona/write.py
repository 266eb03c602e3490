"""L3: the user's persona, rewritten when the trigger rules say so.

Triggers (as the upstream): scenes exist but no persona yet (which includes
the first scene ever written), the scene step asked for a refresh, or
``persona_every`` memories were created since the last persona.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from memstore.derive.events import PersonaUpdated
from memstore.derive.memories.projection import union
from memstore.derive.memories.rules import RULES_VERSION
from memstore.derive.persona import rules as persona_rules
from memstore.derive.prompts import (
    PERSONA_PROMPT_VERSION,
    SceneView,
    build_persona_prompt,
    validate_persona,
)
from memstore.derive.queries import (
    count_created_since,
    memories,
    persona,
    resolve_generation,
    scene_state,
    scenes,
)
from memstore.derive.runs import RunOutcome, append_checked, llm_client, new_id, record_failure
from memstore.derive.scenes import rules as scene_rules
from memstore.errors import LLMError
from memstore.logtext import debug_detail, loggable

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

log = logging.getLogger("memstore.derive")

TOP_MEMORIES = 40


def built_from(
    previous: dict[str, Any] | None,
    scenes_shown: Sequence[dict[str, Any]],
    memories_shown: Sequence[dict[str, Any]],
) -> list[str] | None:
    """The memories an LLM persona may draw on: those its prompt showed, the
    shown scenes' sources, and the previous persona's (which it rewrites).
    None when the previous persona's are not known."""
    if previous is not None and previous.get("memory_ids") is None:
        return None
    before: list[str] = json.loads(previous["memory_ids"]) if previous is not None else []
    return union(
        before,
        *(s.get("source_memory_ids", s["memory_ids"]) for s in scenes_shown),
        [m["memory_id"] for m in memories_shown],
    )


def persona_trigger(conn: Connection, user_id: str, generation: int, every: int) -> str | None:
    """Why the persona is due, or None."""
    current = persona(conn, user_id, generation)
    if current is None:
        return "first_scenes" if scenes(conn, user_id, generation) else None
    st = scene_state(conn, user_id, generation)
    if st is not None and st["refresh_requested"]:
        return "scene_request"
    since = count_created_since(conn, user_id, generation, int(current["updated_position"]))
    if since >= max(every, 1):
        return f"{since}_new_memories"
    return None


def persona_due(store: DeriveContext, user_id: str, *, generation: int | None = None) -> bool:
    with store.db.read() as conn:
        gen = resolve_generation(conn, user_id, generation)
        return (
            persona_trigger(conn, user_id, gen, store.settings.pipeline.persona_every) is not None
        )


def run_l3(store: DeriveContext, user_id: str) -> RunOutcome:
    return run_l3_generation(store, user_id, None)


def run_l3_generation(store: DeriveContext, user_id: str, generation: int | None) -> RunOutcome:
    """Rewrite the persona now (whether or not it is due: callers decide when)."""
    run_id = new_id()
    with store.db.read() as conn:
        since = store.log.last_position(conn)
        gen = resolve_generation(conn, user_id, generation)
        trigger = (
            persona_trigger(conn, user_id, gen, store.settings.pipeline.persona_every) or "manual"
        )
        previous = persona(conn, user_id, gen)
        since = int(previous["updated_position"]) if previous else 0
        all_scenes = scenes(conn, user_id, gen)
        mems = memories(conn, user_id, gen)
    if not mems and not all_scenes:
        return RunOutcome("l3", True, run_id)
    changed = [s for s in all_scenes if int(s["updated_position"]) > since]
    client = llm_client(store)
    try:
        if client is None:
            text = persona_rules.persona_text(mems)
            model, version = "rules", RULES_VERSION
            used: list[str] | None = [m["memory_id"] for m in mems]
        else:
            top = sorted(mems, key=scene_rules.rank)[:TOP_MEMORIES]
            used = built_from(previous, changed, top)
            system, user = build_persona_prompt(
                previous["persona"] if previous else "",
                [
                    SceneView(s["scene_id"], s["name"], s["summary"], s["body"], int(s["heat"]), ())
                    for s in changed
                ],
                [(m["content"], m["type"], int(m["priority"])) for m in top],
            )
            res = client.complete_json(
                kind="l3_persona", system=system, user=user, validate=validate_persona
            )
            text, model, version = res.value, res.model, PERSONA_PROMPT_VERSION
    except LLMError as exc:
        log.warning("l3 run %s for %s failed: %s", run_id, user_id, loggable(exc))
        debug_detail(log, f"l3 run {run_id}", exc)
        return record_failure(store, user_id, "l3", "", run_id, exc, gen, since=since)
    event = PersonaUpdated(
        run_id=run_id,
        generation=gen,
        deriver="rules" if client is None else client.deriver,
        model=model,
        prompt_version=version,
        persona=text,
        trigger=trigger,
        scene_ids=[s["scene_id"] for s in changed],
        memory_ids=used,
    )

    def unchanged(conn: Connection) -> bool:
        now = persona(conn, user_id, gen)
        return (int(now["updated_position"]) if now else 0) == since

    if append_checked(store, user_id, [event], since=since, check=unchanged) is None:
        return RunOutcome("l3", True, run_id)
    return RunOutcome("l3", True, run_id, 1)
