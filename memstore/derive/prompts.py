"""The four derivation prompts and the validators of their answers.

Each step has a ``*_PROMPT_VERSION`` (recorded in every derived event, so a
re-derive can tell which prompt produced what), a builder returning
``(system, user)`` and a validator ``obj -> typed result`` for
``complete_json(validate=...)``:

==========  =======================  ====================  ==================
step        builder                  validator             result
==========  =======================  ====================  ==================
L1 extract  build_extract_prompt     validate_extract      list[ExtractedMemory]
L1 dedup    build_dedup_prompt       validate_dedup        DedupDecision
L2 scenes   build_scene_prompt       validate_scenes       SceneResult
L3 persona  build_persona_prompt     validate_persona      str
==========  =======================  ====================  ==================

Validators are strict on shape and lenient on cosmetics: they raise
:class:`memstore.errors.LLMOutputError` (and nothing else) only when the
top-level shape is wrong; bad items are repaired or dropped. Every system
prompt names its version, so a scripted test server can route on
``PROMPT_VERSION in system``.

The code lives in :mod:`memstore.derive.memories.prompts` and
:mod:`memstore.derive.scenes.prompts`; import from here.
"""

from __future__ import annotations

from memstore.derive.memories.prompts import (
    DEDUP_ACTIONS,
    DEDUP_PROMPT_VERSION,
    EXTRACT_PROMPT_VERSION,
    MAX_MEMORY_CHARS,
    MEMORY_TYPES,
    CandidateLike,
    DedupAction,
    DedupDecision,
    ExistingMemory,
    ExtractedMemory,
    MemoryType,
    PromptMessage,
    build_dedup_prompt,
    build_extract_prompt,
    clip,
    validate_dedup,
    validate_extract,
)
from memstore.derive.persona.prompts import (
    MAX_PERSONA_CHARS,
    PERSONA_PROMPT_VERSION,
    build_persona_prompt,
    validate_persona,
)
from memstore.derive.scenes.prompts import (
    MAX_SCENE_BODY_CHARS,
    SCENE_OPS,
    SCENE_PROMPT_VERSION,
    SceneOperation,
    SceneOpKind,
    SceneResult,
    SceneView,
    build_scene_prompt,
    validate_scenes,
)

__all__ = [
    "DEDUP_ACTIONS",
    "DEDUP_PROMPT_VERSION",
    "EXTRACT_PROMPT_VERSION",
    "MAX_MEMORY_CHARS",
    "MAX_PERSONA_CHARS",
    "MAX_SCENE_BODY_CHARS",
    "MEMORY_TYPES",
    "PERSONA_PROMPT_VERSION",
    "SCENE_OPS",
    "SCENE_PROMPT_VERSION",
    "CandidateLike",
    "DedupAction",
    "DedupDecision",
    "ExistingMemory",
    "ExtractedMemory",
    "MemoryType",
    "PromptMessage",
    "SceneOpKind",
    "SceneOperation",
    "SceneResult",
    "SceneView",
    "build_dedup_prompt",
    "build_extract_prompt",
    "build_persona_prompt",
    "build_scene_prompt",
    "clip",
    "validate_dedup",
    "validate_extract",
    "validate_persona",
    "validate_scenes",
]
