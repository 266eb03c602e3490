"""The offline rule-based deriver for L3: the persona lists the highest-priority
memories of each type, under headings in the user's language."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memstore.derive.persona.prompts import MAX_PERSONA_CHARS
from memstore.derive.scenes.rules import fit_lines, mostly_cjk, rank

PERSONA_LINES_PER_TYPE = {"persona": 12, "instruction": 10, "episodic": 8}


_HEADINGS = {
    False: ("# Profile", {"persona": "## Basics", "instruction": "## Working with the user",
                          "episodic": "## Recent events"}),
    True: ("# 用户画像", {"persona": "## 基本信息", "instruction": "## 与用户协作",
                        "episodic": "## 近期经历"}),
}  # fmt: skip


def persona_text(mems: Sequence[dict[str, Any]]) -> str:
    """A Markdown profile from the highest-priority memories of each type."""
    if not mems:
        return ""
    title, heads = _HEADINGS[mostly_cjk([m["content"] for m in mems])]
    lines = [title]
    for type_ in ("persona", "instruction", "episodic"):
        of_type = [m for m in mems if m["type"] == type_]
        if type_ == "episodic":
            of_type.sort(key=lambda m: m["activity_start"] or m["occurred_at"] or "", reverse=True)
        else:
            of_type.sort(key=rank)
        if of_type:
            lines += ["", heads[type_]]
            lines += [f"- {m['content']}" for m in of_type[: PERSONA_LINES_PER_TYPE[type_]]]
    return fit_lines(lines, MAX_PERSONA_CHARS).strip()
