"""What a forgotten memory's text went into follows the forget, in the same transaction.

Each scene records every memory its text was built from
(``l2_scenes.source_memory_ids``) and each persona the same
(``l3_persona.memory_ids``). When memories are retired on request or erased,
every scene and the persona built from any of them is rebuilt at once, from
the memories that are left, by the offline rules, and the result is appended
with the forget itself: there is no moment at which a read (recall, persona,
scenes, navigation, export, tools) can see the old text, whatever the deriver.

With an LLM deriver the rule-built text is a stand-in: the persona is queued
for the LLM at once (the scene event carries ``persona_refresh`` and
``FORGET_NOTE``; the pipeline's in-transaction hook queues an L3 item when it
sees one), and until
that run succeeds the stand-in, which holds none of the forgotten text, is
what is served. A failing LLM therefore never brings stale text back. Scene
stand-ins keep the rules' text until the next scene run updates them.

Everything here is a pure function of the projections, and its outcome is
recorded as ordinary ``l2.scenes_updated``/``l3.persona_updated`` events, so
a rebuild from the log gives the same state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from memstore.derive.events import MemoryForgotten, PersonaUpdated, ScenesUpdated, derive_stream
from memstore.derive.memories.rules import RULES_VERSION
from memstore.derive.persona.rules import persona_text
from memstore.derive.queries import (
    active_generation,
    erased_since,
    memories,
    memories_by_id,
    persona,
    scene_state,
    scenes,
)
from memstore.derive.runs import new_id
from memstore.derive.scenes.rules import scene_ops, scene_text
from memstore.events.log import NewEvent
from memstore.events.types import Event

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

FORGET_NOTE = "rewritten without forgotten memories"


def stale(built_from: Collection[str] | None, gone: Collection[str]) -> bool:
    """Whether text built from ``built_from`` (None: not known) may hold the
    text of a memory in ``gone``."""
    return built_from is None or not set(gone).isdisjoint(built_from)


def follow_forget(
    conn: Connection, user_id: str, generation: int, gone: Collection[str], *, llm: bool
) -> list[Event]:
    """The events that rebuild, without ``gone``, every scene and the persona
    of ``generation`` whose text any memory of ``gone`` went into.

    ``gone`` memories may still be live in ``conn`` (a forget computes this
    before its own event applies). ``llm``: the deriver is an LLM, so the
    persona is asked for again (the caller queues it)."""
    gone = set(gone)
    live = [m for m in memories(conn, user_id, generation) if m["memory_id"] not in gone]
    by_id = {m["memory_id"]: m for m in live}
    ops: list[dict[str, Any]] = []
    for s in scenes(conn, user_id, generation):
        if not stale([*s["source_memory_ids"], *s["memory_ids"]], gone):
            continue
        keep = [by_id[i] for i in s["memory_ids"] if i in by_id]
        if not keep:
            ops.append({"op": "delete", "scene_id": s["scene_id"], "source_scene_ids": [],
                        "name": s["name"], "memory_ids": []})  # fmt: skip
            continue
        summary, body = scene_text(s["name"], keep)
        ids = [m["memory_id"] for m in keep]
        ops.append({"op": "rewrite", "scene_id": s["scene_id"], "source_scene_ids": [],
                    "name": s["name"], "summary": summary, "body": body, "memory_ids": ids,
                    "source_memory_ids": ids})  # fmt: skip
    out: list[Event] = []
    current = persona(conn, user_id, generation)
    persona_stale = current is not None and stale(
        None if current["memory_ids"] is None else json.loads(current["memory_ids"]), gone
    )
    if persona_stale:
        out.append(_rule_persona(generation, live))
    if ops or (persona_stale and llm):
        out.append(_scene_event(conn, user_id, generation, ops, llm))
    return out


def replace_lost(
    conn: Connection,
    user_id: str,
    generation: int,
    lost: Collection[str],
    *,
    rewrite_persona: bool,
    llm: bool,
    max_scenes: int,
) -> list[Event]:
    """After an erasure removed scenes (and persona versions) that held erased
    text: place their surviving memories ``lost`` into scenes again and, when
    ``rewrite_persona``, write the persona again, by the rules (the text of
    what was removed is gone from the log; nothing is kept from it)."""
    live = memories(conn, user_id, generation)
    changed = [m for m in live if m["memory_id"] in set(lost)]
    ops: list[dict[str, Any]] = []
    if changed:

        def lookup(ids: list[str]) -> dict[str, dict[str, Any]]:
            found = memories_by_id(conn, user_id, ids)
            return {k: v for k, v in found.items() if v["status"] == "active"}

        ops, _ = scene_ops(changed, scenes(conn, user_id, generation), max_scenes, lookup)
    out: list[Event] = []
    if rewrite_persona:
        out.append(_rule_persona(generation, live))
    if ops or (rewrite_persona and llm):
        out.append(_scene_event(conn, user_id, generation, ops, llm))
    return out


def _rule_persona(generation: int, live: Sequence[dict[str, Any]]) -> PersonaUpdated:
    return PersonaUpdated(
        run_id=new_id(),
        generation=generation,
        deriver="rules",
        model="rules",
        prompt_version=RULES_VERSION,
        persona=persona_text(live),
        trigger="forget",
        memory_ids=[m["memory_id"] for m in live],
    )


def _scene_event(
    conn: Connection, user_id: str, generation: int, ops: list[dict[str, Any]], llm: bool
) -> ScenesUpdated:
    # Appended after a persona event: that one clears the refresh request
    # this one sets for the LLM.
    st = scene_state(conn, user_id, generation)
    return ScenesUpdated(
        run_id=new_id(),
        generation=generation,
        deriver="rules",
        model="rules",
        prompt_version=RULES_VERSION,
        memory_cursor=int(st["memory_cursor"]) if st else 0,
        memory_ids=[],
        operations=ops,
        persona_refresh=llm,
        notes=[FORGET_NOTE],
    )


def retire(
    store: DeriveContext,
    user_id: str,
    memory_id: str | Callable[[Connection], str | None],
    reason: str,
    *,
    since: int | None = None,
) -> str | None:
    """Append the forget of one memory and everything that follows it, atomically.

    ``memory_id`` may be a function choosing the memory inside the write
    transaction (None: nothing to forget). Returns the memory forgotten, or
    None when nothing was appended (nothing chosen, or the user was erased
    after ``since``)."""
    llm = store.llm_client() is not None
    chosen: str | None = None

    def build(conn: Connection) -> list[NewEvent]:
        nonlocal chosen
        if since is not None and erased_since(conn, user_id, since):
            return []
        chosen = memory_id(conn) if callable(memory_id) else memory_id
        if chosen is None:
            return []
        gen = active_generation(conn, user_id)
        payloads: list[Event] = [MemoryForgotten(chosen, reason)]
        payloads += follow_forget(conn, user_id, gen, {chosen}, llm=llm)
        return [NewEvent(derive_stream(user_id), p, user_id=user_id) for p in payloads]

    stored = store.kernel.append_if(build)
    return chosen if stored else None


__all__ = ["FORGET_NOTE", "follow_forget", "replace_lost", "retire", "stale"]
