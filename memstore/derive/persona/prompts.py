"""L3 prompt: the persona profile (same validator policy as the L1 prompts)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from memstore.derive.memories.prompts import (
    JSON_ONLY,
    answer_text,
    clip,
    dumps,
    raw_json,
    require_object,
)
from memstore.derive.scenes.prompts import SceneView
from memstore.errors import LLMOutputError

PERSONA_PROMPT_VERSION = "l3-persona/1"
MAX_PERSONA_CHARS = 2000

PERSONA_SYSTEM = f"""\
You are the profile writer of memstore (prompt {PERSONA_PROMPT_VERSION}). You write the user's \
profile: a Markdown document of at most {MAX_PERSONA_CHARS} characters that an AI assistant \
reads at the start of every conversation to know who the user is and how to work with them.

You receive the PREVIOUS PROFILE (empty the first time), the CHANGED SCENES (topic blocks that \
changed since then) and the TOP MEMORIES (the user's highest-priority facts and rules).

Layout (leave out a section that would be empty; translate the headings into the profile's \
language):
# Profile
One sentence on who the user is.
## Basics: name, occupation, location, family, as far as known.
## Preferences and habits: stable tastes, routines, likes and dislikes.
## Working with the user: standing instructions (every instruction with priority -1 must be \
here), preferred language, tone and format, things to avoid.
## Current focus: ongoing projects, plans and recent important events, with dates.

Rules:
- Start from the previous profile: keep what is still true, work in the changes, correct what \
the scenes or memories contradict, and drop what no longer matters. If nothing relevant \
changed, return the previous profile unchanged.
- Use only the evidence given. Do not guess age, gender, income or character traits; leave a \
detail out rather than speculate.
- Facts over adjectives, short sentences, no repetition. Condense older, minor details first \
when space runs short.
- Do not list the scenes or add a navigation section: memstore appends that itself.
- Language: write in the language of the scenes and memories, which is the user's language.

{JSON_ONLY} Schema:
{{"persona": string (the Markdown profile, newlines escaped as \\n)}}

Example answer:
{{"persona": "# Profile\\nA data engineer in Munich who is training for a first \
marathon.\\n\\n## Basics\\n- Name: Lena\\n- Data engineer at Siemens since 2025\\n\\n\
## Working with the user\\n- Always answer in German.\\n- Prefers short answers with code \
first.\\n\\n## Current focus\\n- Berlin Marathon on 2025-09-21"}}"""


def build_persona_prompt(
    previous_persona: str,
    changed_scenes: Sequence[SceneView],
    top_memories: Sequence[tuple[str, str, int]],
) -> tuple[str, str]:
    """(system, user) for a persona run. ``top_memories`` are (content, type, priority)."""
    # JSON like the other prompts: a scene body's own Markdown headings cannot be
    # mistaken for the boundaries of this message.
    scene_blocks = [
        dumps({"name": s.name, "heat": s.heat, "summary": s.summary, "body": s.body})
        for s in changed_scenes
    ]
    memory_lines = [dumps({"content": c, "type": t, "priority": p}) for c, t, p in top_memories]
    user = (
        "PREVIOUS PROFILE:\n"
        + (previous_persona.strip() or "(none yet: write the first profile)")
        + "\n\nCHANGED SCENES:\n"
        + ("\n".join(scene_blocks) or "(none)")
        + "\n\nTOP MEMORIES:\n"
        + ("\n".join(memory_lines) or "(none)")
    )
    return PERSONA_SYSTEM, user


# A model sometimes wraps the Markdown in a code fence inside the JSON string.
_FENCE = re.compile(r"\A```[A-Za-z]*[ \t]*\n(?P<body>.*)\n```\Z", re.DOTALL)


def validate_persona(obj: object) -> str:
    """``{"persona": "..."}`` → the profile text, at most 2000 code points.

    Raises when the key is missing, not a string, or empty: an empty profile
    would silently wipe the previous one.
    """
    data = require_object(obj)
    value = data.get("persona")
    if not isinstance(value, str):
        raise LLMOutputError("'persona' is missing or not a string", raw=raw_json(obj))
    text = answer_text(value)
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group("body").strip()
    if not text:
        raise LLMOutputError("'persona' is empty", raw=raw_json(obj))
    return clip(text, MAX_PERSONA_CHARS)
