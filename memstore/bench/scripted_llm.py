"""A scripted LLM: answers derivation's prompts (extract, dedup, scenes,
persona) from fixed scripts, so derivation runs end to end against
:mod:`memstore.bench.fakeopenai` without a model (benchmarks and tests)."""

# ruff: noqa: E501  (the scripts below read best one entry per line)

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from memstore.derive.prompts import (
    DEDUP_PROMPT_VERSION,
    EXTRACT_PROMPT_VERSION,
    PERSONA_PROMPT_VERSION,
    SCENE_PROMPT_VERSION,
)

# --- the scripted LLM ---------------------------------------------------------

KINDS = {
    EXTRACT_PROMPT_VERSION: "extract",
    DEDUP_PROMPT_VERSION: "dedup",
    SCENE_PROMPT_VERSION: "scenes",
    PERSONA_PROMPT_VERSION: "persona",
}

# substring of a user message -> memories the "model" extracts from it
FACTS: dict[str, list[dict[str, Any]]] = {
    "name is Alice": [{"content": "The user's name is Alice.", "type": "persona", "priority": 90, "scene_name": "Identity"}],
    "live in Berlin": [{"content": "The user lives in Berlin.", "type": "persona", "priority": 80, "scene_name": "Home"}],
    "moved to Munich": [{"content": "The user lives in Munich.", "type": "persona", "priority": 80, "scene_name": "Home"}],
    "vegetarian": [{"content": "The user is vegetarian.", "type": "persona", "priority": 85, "scene_name": "Food"}],
    "vegan now": [{"content": "The user is vegan.", "type": "persona", "priority": 85, "scene_name": "Food"}],
    "like running": [{"content": "The user likes running.", "type": "persona", "priority": 60, "scene_name": "Sport"}],
    "Berlin marathon": [{"content": "The user trains for the Berlin marathon.", "type": "episodic", "priority": 60, "scene_name": "Sport"}],
    "marathons every year": [{"content": "The user runs marathons every year.", "type": "persona", "priority": 65, "scene_name": "Sport"}],
    "Lisbon": [{"content": "The user travelled to Lisbon in May 2023.", "type": "episodic", "priority": 60, "scene_name": "Travel", "activity_start": "2023-05-01"}],
    "answer in English": [{"content": "Always answer in English.", "type": "instruction", "priority": -1, "scene_name": "Working style"}],
}  # fmt: skip

# new memory content -> (action, substrings identifying targets, resulting content)
DEDUP: dict[str, tuple[str, list[str], str]] = {
    "The user lives in Munich.": ("supersede", ["lives in Berlin"], "The user lives in Munich (moved from Berlin)."),
    "The user is vegan.": ("update", ["vegetarian"], "The user is vegan (was vegetarian)."),
    "The user runs marathons every year.": ("merge", ["likes running", "Berlin marathon"], "The user loves running and runs a marathon every year, including Berlin."),
}  # fmt: skip

SCENE_OF = [("Alice", "About Alice"), ("lives", "About Alice"), ("Munich", "About Alice"),
            ("vegan", "Food"), ("vegetarian", "Food"), ("run", "Sport"), ("marathon", "Sport"),
            ("Lisbon", "Travel"), ("English", "Working style")]  # fmt: skip


def json_lines(block: str) -> list[dict[str, Any]]:
    out = []
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def between(s: str, start: str, end: str) -> str:
    i = s.index(start) + len(start)
    j = s.index(end, i) if end in s[i:] else len(s)
    return s[i:j]


class ScriptedLLM:
    """Answers each prompt kind from the scripts above; ``override[kind]`` replaces one."""

    def __init__(self) -> None:
        self.override: dict[str, str | Callable[[str], str]] = {}
        self.calls: list[str] = []

    def __call__(self, request: dict[str, Any]) -> str:
        system = request["messages"][0]["content"]
        user = request["messages"][1]["content"]
        kind = next(k for v, k in KINDS.items() if v in system)
        self.calls.append(kind)
        if len(request["messages"]) > 2:  # the client's corrective retry
            user = request["messages"][1]["content"]
        o = self.override.get(kind)
        if o is not None:
            return o(user) if callable(o) else o
        answer: dict[str, Any] = getattr(self, kind)(user)
        return json.dumps(answer)

    def extract(self, user: str) -> dict[str, Any]:
        msgs = json_lines(between(user, "NEW MESSAGES", "Ids you may cite"))
        out = []
        for m in msgs:
            if m["role"] != "user":
                continue
            for key, facts in FACTS.items():
                if key in m["text"]:
                    out += [{**f, "source_message_ids": [m["id"]]} for f in facts]
        return {"memories": out}

    def dedup(self, user: str) -> dict[str, Any]:
        new = json.loads(between(user, "NEW MEMORY:\n", "\n"))
        existing = json_lines(between(user, "EXISTING MEMORIES:", "Ids you may use"))
        same = [e["id"] for e in existing if e["content"] == new["content"]]
        if same:
            return {"action": "skip", "target_ids": same[:1], "reason": "same"}
        script = DEDUP.get(new["content"])
        if script is None:
            return {"action": "store", "target_ids": [], "content": new["content"], "reason": "new"}
        action, keys, content = script
        targets = [e["id"] for e in existing if any(k in e["content"] for k in keys)]
        return {"action": action, "target_ids": targets, "content": content,
                "type": new["type"], "priority": new["priority"], "scene_name": new["scene_name"],
                "reason": "scripted"}  # fmt: skip

    def scenes(self, user: str) -> dict[str, Any]:
        new = json_lines(between(user, "NEW MEMORIES:", "EXISTING SCENES:"))
        scenes = json_lines(between(user, "EXISTING SCENES:", "Scene ids you may use"))
        by_name: dict[str, list[dict[str, Any]]] = {}
        for m in new:
            name = next((n for k, n in SCENE_OF if k in m["content"]), "Other")
            by_name.setdefault(name, []).append(m)
        ops = []
        for name, mems in by_name.items():
            lines = "\n".join(f"- {m['content']}" for m in mems)
            old = next((s for s in scenes if s["name"] == name), None)
            ids = [m["id"] for m in mems]
            if old is None:
                ops.append({"op": "create", "name": name, "summary": f"{name} of the user",
                            "body": lines, "memory_ids": ids})  # fmt: skip
            else:
                ops.append({"op": "update", "scene_id": old["scene_id"],
                            "body": old["body"] + "\n" + lines, "memory_ids": ids})  # fmt: skip
        refresh = any("Munich" in m["content"] for m in new)
        return {"operations": ops, "persona_refresh": refresh}

    def persona(self, user: str) -> dict[str, Any]:
        top = json_lines(between(user, "TOP MEMORIES:", "\x00"))
        return {"persona": "# Profile\n" + "\n".join(f"- {m['content']}" for m in top)}
