"""L2 prompt: scene-block operations (the persona prompt is in ``derive/persona/prompts.py``).

Same validator policy as :mod:`memstore.derive.memories.prompts`: a wrong top-level
shape or an operation that does not follow the schema raises
:class:`LLMOutputError` (the client retries once, then the run fails and the
scene cursor does not move); cosmetic faults are repaired or dropped, and what
was changed is reported in :attr:`SceneResult.notes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memstore.derive.memories.prompts import (
    JSON_ONLY,
    MAX_SCENE_NAME_CHARS,
    answer_text,
    clip,
    coerce_int,
    dumps,
    raw_json,
    require_object,
    short_repr,
    str_ids,
)
from memstore.errors import LLMOutputError

SCENE_PROMPT_VERSION = "l2-scenes/1"

MAX_SCENE_BODY_CHARS = 1500
MAX_SCENE_SUMMARY_CHARS = 300

SceneOpKind = Literal["create", "update", "merge", "delete"]
SCENE_OPS: tuple[SceneOpKind, ...] = ("create", "update", "merge", "delete")

# ---------------------------------------------------------------------------
# L2 scenes
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SceneView:
    """A scene block as the L2 and L3 prompts show it."""

    scene_id: str
    name: str
    summary: str
    body: str
    heat: int
    memory_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SceneOperation:
    """One validated operation, in the order the projection applies it.

    - create: ``name`` and ``body`` non-empty, ``summary`` a string (maybe "").
    - update: ``scene_id`` known; ``name``/``summary``/``body`` None = keep current.
    - merge: ``source_scene_ids`` (two or more known scenes, removed) → one new
      scene with non-empty ``name`` and ``body``; heat = sum + 1.
    - delete: ``scene_id`` known; text fields None.

    ``memory_ids`` are the memories this operation folds into the scene, on top
    of those the scene (or, for merge, its sources) already had.
    """

    op: SceneOpKind
    scene_id: str | None
    source_scene_ids: tuple[str, ...]
    name: str | None
    summary: str | None
    body: str | None
    memory_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SceneResult:
    """The scene step's outcome. ``notes`` say what the validator dropped or
    changed; ``dropped_creates`` counts creates refused by the scene limit."""

    operations: tuple[SceneOperation, ...]
    persona_refresh: bool
    dropped_creates: int = 0
    notes: tuple[str, ...] = ()


SCENE_SYSTEM = f"""\
You are the scene editor of memstore (prompt {SCENE_PROMPT_VERSION}). You keep one user's \
memories organised into a small set of scene blocks. Each block covers one area of the user's \
life or work ("Marathon training", "Moving to Munich", "The memstore project") and reads as a \
briefing an assistant can skim before talking to the user.

You receive NEW MEMORIES (with ids) and the EXISTING SCENES (id, name, summary, heat, body). \
Place every new memory in the scene it belongs to with these operations:
- "update": the memories belong in an existing scene. Give scene_id and the new body; give name \
or summary only to change them. Work the new facts into the text where they belong instead of \
appending them at the end.
- "create": a clearly new topic that no existing scene covers. Give name, summary and body.
- "merge": two or more existing scenes belong together (the same topic, or the scene limit \
forces it). Give source_scene_ids and the name, summary and body of the combined scene; the \
source scenes are removed.
- "delete": a scene with nothing of lasting value left. Give scene_id. Use it rarely.
Prefer update to create: when in doubt, update.

The scene limit: the user message gives the current number of scenes, the maximum, and what \
this run may do. After your operations the number of scenes must not exceed the maximum; when \
you must make room, merge the scenes that overlap most, or else the ones with the lowest heat.

Body: Markdown, at most {MAX_SCENE_BODY_CHARS} characters. A suggested layout (use what fits, \
translate the headings into the body's language): a short opening paragraph on who the user is \
in this area and what is going on; "Facts and preferences" as a list of stable, reusable facts; \
"Timeline" with dated events, oldest first; "Changes and open points" for facts that changed \
(say from what to what, and when) or that contradict each other. Keep what is still true from the \
old body; when something changed, state the current fact and note the change. Only use what the \
memories and the old body say; no guesses. Do not put heat, ids or dates of editing in the body.

summary: one sentence (at most 200 characters) describing the scene, used in the navigation list.
name: at most 6 words.
memory_ids: the ids of the NEW MEMORIES this operation takes in. Each new memory should appear in \
exactly one operation.
persona_refresh: true only when the new memories change the big picture of who the user is (a \
new job, a move, a major life event, a new standing rule for the assistant); otherwise false.

Language: write name, summary and body in the language of the memories (Chinese memories give a \
Chinese scene). Keys and op names stay in English exactly as in the schema.

{JSON_ONLY} Schema:
{{"operations": [{{"op": "create" | "update" | "merge" | "delete", "scene_id": string (update, \
delete), "source_scene_ids": [string, ...] (merge), "name": string, "summary": string, "body": \
string, "memory_ids": [string, ...]}}], "persona_refresh": boolean}}

Example. New memories: {{"id": "n1", "content": "The user signed up for the Berlin Marathon on \
2025-09-21.", "type": "episodic"}}, {{"id": "n2", "content": "The user prefers to run early in \
the morning.", "type": "persona"}}. Existing scene s3 "Running" already describes the user's \
weekly runs. Answer:
{{"operations": [{{"op": "update", "scene_id": "s3", "summary": "The user's running habits and \
the Berlin Marathon in September 2025.", "body": "The user runs three times a week and is \
training for a first marathon.\\n\\n## Facts and preferences\\n- Runs early in the morning\\n\\n\
## Timeline\\n- 2025-09-21: Berlin Marathon (registered)", "memory_ids": ["n1", "n2"]}}], \
"persona_refresh": false}}"""


def _limit_rule(count: int, max_scenes: int) -> str:
    """The rule for this run, worked out here so the model need not count.

    The design asks for "at most max_scenes; at the limit it must merge, one
    below it must not create". Read literally the two halves clash (a create
    one below the limit would only reach the limit), so we read it as a hard
    limit plus one slot of headroom: the validator enforces count <= max_scenes;
    the prompt keeps the model from filling the last slot, so that a genuinely
    new topic can still be placed after a merge, and at (or above, after the
    setting was lowered) the limit it must shrink the set by merging before it
    may create anything.
    """
    if count >= max_scenes:
        return (
            f"The limit is reached ({count} of {max_scenes}). You must merge related scenes in "
            "this run so that the count goes down, and you may create a scene only if merges "
            f"leave the count below {max_scenes}. Put new memories into existing or merged scenes."
        )
    if count == max_scenes - 1 and count > 0:  # with no scene yet, the first must be created
        return (
            f"One slot is left ({count} of {max_scenes}). Do not create a scene: put new memories "
            "into the closest existing scene, or merge scenes first if none fits."
        )
    return (
        f"There are {count} of at most {max_scenes} scenes. You may create a scene for a clearly "
        "new topic, but prefer updating an existing one."
    )


def build_scene_prompt(
    new_memories: Sequence[tuple[str, str, str]],
    scenes: Sequence[SceneView],
    max_scenes: int,
) -> tuple[str, str]:
    """(system, user) for one scene run. ``new_memories`` are (id, content, type)."""
    memory_lines = [dumps({"id": i, "content": c, "type": t}) for i, c, t in new_memories]
    scene_lines = [
        dumps(
            {
                "scene_id": s.scene_id,
                "name": s.name,
                "summary": s.summary,
                "heat": s.heat,
                "body": s.body,
            }
        )
        for s in scenes
    ]
    user = (
        f"{_limit_rule(len(scenes), max_scenes)}\n\n"
        "NEW MEMORIES:\n"
        + ("\n".join(memory_lines) or "(none)")
        + "\n\nEXISTING SCENES:\n"
        + ("\n".join(scene_lines) or "(none yet)")
        + f"\n\nScene ids you may use: {dumps([s.scene_id for s in scenes])}"
        + f"\nMemory ids you may use: {dumps([m[0] for m in new_memories])}"
    )
    return SCENE_SYSTEM, user


def _as_op(value: object) -> SceneOpKind | None:
    text = answer_text(value, one_line=True).lower()
    for op in SCENE_OPS:
        if text == op:
            return op
    return None


def _as_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    number = coerce_int(value)
    return number is not None and number != 0


def _fields(item: dict[str, object]) -> tuple[str, str, str]:
    name = clip(answer_text(item.get("name"), one_line=True), MAX_SCENE_NAME_CHARS)
    summary = clip(answer_text(item.get("summary"), one_line=True), MAX_SCENE_SUMMARY_CHARS)
    body = clip(answer_text(item.get("body")), MAX_SCENE_BODY_CHARS)
    return name, summary, body


def validate_scenes(
    obj: object, scene_ids: set[str], memory_ids: set[str], max_scenes: int
) -> SceneResult:
    """``{"operations": [...], "persona_refresh": bool}`` → operations safe to apply.

    Raises on an op that is not an object, has an unknown kind, is a create or
    merge without a name or body, or updates/deletes a scene that does not
    exist (or an earlier op removed): dropping it would lose the memories it
    places. Filters memory ids to ``memory_ids``; drops an update that changes
    nothing. A merge with one known source becomes an update of it; with none,
    a create. Finally drops creates from the end until the resulting count is
    at most ``max_scenes`` (counting merges and deletes wherever they appear).
    """
    data = require_object(obj, "operations")
    items = data["operations"]
    assert isinstance(items, list)  # checked by require_object; narrows for mypy
    notes: list[str] = []
    ops: list[SceneOperation] = []
    gone: set[str] = set()  # removed by an earlier delete or merge

    def bad(index: int, problem: str) -> LLMOutputError:
        return LLMOutputError(f"operations[{index}]: {problem}", raw=raw_json(obj))

    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise bad(index, f"is {type(item).__name__}, not an object")
        op = _as_op(item.get("op"))
        name, summary, body = _fields(item)
        mems = str_ids(item.get("memory_ids", []), memory_ids)
        live = scene_ids - gone
        if op is None:
            keys = short_repr(sorted(str(k) for k in item), 120)
            raise bad(
                index,
                f"'op' is {short_repr(item.get('op'))}; expected one of "
                f"{', '.join(SCENE_OPS)} (keys: {keys})",
            )
        if op == "merge":
            sources = str_ids(item.get("source_scene_ids", []), live)
            if len(sources) == 1:
                notes.append(f"op {index}: merge of one scene treated as update")
                op, item = "update", {**item, "scene_id": sources[0]}
            elif not sources:
                notes.append(f"op {index}: merge without known sources treated as create")
                op = "create"
            else:
                if not (name and body):
                    raise bad(index, "a merge needs a non-empty 'name' and 'body'")
                gone.update(sources)
                ops.append(SceneOperation("merge", None, sources, name, summary, body, mems))
                continue
        if op == "create":
            if not (name and body):
                raise bad(index, "a create needs a non-empty 'name' and 'body'")
            ops.append(SceneOperation("create", None, (), name, summary, body, mems))
            continue
        target = str_ids(item.get("scene_id"), live)
        if not target:
            raise bad(
                index,
                f"{op} of unknown scene {short_repr(item.get('scene_id'))}; scene ids you may "
                f"use: {short_repr(sorted(live), 160)}",
            )
        if op == "delete":
            gone.add(target[0])
            ops.append(SceneOperation("delete", target[0], (), None, None, None, ()))
        elif not (name or summary or body or mems):
            # It would change nothing but still add heat.
            notes.append(f"op {index}: empty update of {target[0]!r} dropped")
        else:
            ops.append(
                SceneOperation(
                    "update", target[0], (), name or None, summary or None, body or None, mems
                )
            )

    final = len(scene_ids) + sum(
        1 if o.op == "create" else -1 if o.op == "delete" else 1 - len(o.source_scene_ids)
        for o in ops
        if o.op != "update"
    )
    dropped = 0
    for position in range(len(ops) - 1, -1, -1):
        if final <= max_scenes:
            break
        if ops[position].op == "create":
            notes.append(
                f"create {ops[position].name!r} dropped: over the {max_scenes}-scene limit"
            )
            del ops[position]
            final -= 1
            dropped += 1
    return SceneResult(
        operations=tuple(ops),
        persona_refresh=_as_bool(data.get("persona_refresh", False)),
        dropped_creates=dropped,
        notes=tuple(notes),
    )
