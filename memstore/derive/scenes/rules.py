"""The offline rule-based deriver for L2 (and the helpers L3's uses).

Scenes group memories by the scene name extraction gave them (the rules
extractor names a small fixed set of topics), bodies list the scene's live
memories by priority, and the persona lists the highest-priority memories
of each type. Deterministic, language-aware, and honest about being a list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from memstore.derive.prompts import MAX_SCENE_BODY_CHARS, clip
from memstore.derive.runs import new_id
from memstore.text import has_cjk

MAX_SUMMARY_CHARS = 200


def rank(m: dict[str, Any]) -> tuple[int, int]:
    p = int(m["priority"])
    return (-(101 if p < 0 else p), int(m["id"]))


def mostly_cjk(texts: Sequence[str]) -> bool:
    return sum(1 for t in texts if has_cjk(t)) * 2 > len(texts)


def fit_lines(lines: Sequence[str], limit: int) -> str:
    """Whole lines only, as many as fit in ``limit`` characters."""
    out: list[str] = []
    used = 0
    for line in lines:
        cost = len(line) + (1 if out else 0)
        if used + cost > limit:
            if not out:  # a single over-long line: cut it rather than show nothing
                out.append(clip(line, limit))
            break
        out.append(line)
        used += cost
    return "\n".join(out)


def scene_text(name: str, mems: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """(summary, body) of a scene from its live memories."""
    ordered = sorted(mems, key=rank)
    contents = [m["content"] for m in ordered]
    cjk = mostly_cjk(contents) if contents else has_cjk(name)
    n = len(contents)
    head = (f"{n}条记忆：" if cjk else f"{n} {'memory' if n == 1 else 'memories'}: ") + (
        "；".join(contents[:3]) if cjk else " ".join(contents[:3])
    )
    body = fit_lines([f"- {c}" for c in contents], MAX_SCENE_BODY_CHARS)
    return clip(head, MAX_SUMMARY_CHARS), body


def scene_ops(
    changed: Sequence[dict[str, Any]],
    scenes: Sequence[dict[str, Any]],
    max_scenes: int,
    lookup: Callable[[list[str]], dict[str, dict[str, Any]]],
) -> tuple[list[dict[str, Any]], bool]:
    """Operations placing ``changed`` memories into scenes by scene name.

    ``lookup`` maps memory ids to live memory dicts (retired ones absent). At
    the scene limit the two coldest scenes are merged before a new one is made.
    """
    live: dict[str, dict[str, Any]] = {
        s["scene_id"]: {"name": s["name"], "heat": int(s["heat"]), "mems": list(s["memory_ids"])}
        for s in scenes
    }
    ops: list[dict[str, Any]] = []
    groups: dict[str, list[dict[str, Any]]] = {}
    for m in changed:
        name = (m["scene_name"] or "").strip() or ("其他" if has_cjk(m["content"]) else "General")
        groups.setdefault(name, []).append(m)

    def find(name: str) -> str | None:
        for sid, s in live.items():
            if s["name"].casefold() == name.casefold() or name.casefold() in s.get("aka", ()):
                return sid
        return None

    def text_for(name: str, ids: list[str], extra: Sequence[dict[str, Any]]) -> tuple[str, str]:
        known = lookup(ids)
        mems = [known[i] for i in ids if i in known]
        seen = {m["memory_id"] for m in mems}
        return scene_text(name, mems + [m for m in extra if m["memory_id"] not in seen])

    for name, mems in groups.items():
        ids = [m["memory_id"] for m in mems]
        sid = find(name)
        if sid is not None:
            s = live[sid]
            s["mems"] = s["mems"] + [i for i in ids if i not in s["mems"]]
            s["heat"] += 1
            summary, body = text_for(s["name"], s["mems"], mems)
            ops.append({"op": "update", "scene_id": sid, "source_scene_ids": [], "name": None,
                        "summary": summary, "body": body, "memory_ids": ids})  # fmt: skip
            continue
        if len(live) >= max(max_scenes, 1):
            a, b = sorted(live, key=lambda k: (live[k]["heat"], live[k]["name"]))[:2]
            merged_id = new_id()
            merged_name = clip(f"{live[a]['name']} / {live[b]['name']}", 80)
            merged_mems = live[a]["mems"] + [i for i in live[b]["mems"] if i not in live[a]["mems"]]
            summary, body = text_for(merged_name, merged_mems, [])
            ops.append({"op": "merge", "scene_id": merged_id, "source_scene_ids": [a, b],
                        "name": merged_name, "summary": summary, "body": body,
                        "memory_ids": []})  # fmt: skip
            aka = {live[a]["name"].casefold(), live[b]["name"].casefold()}
            heat = live[a]["heat"] + live[b]["heat"] + 1
            del live[a], live[b]
            live[merged_id] = {"name": merged_name, "heat": heat, "mems": merged_mems, "aka": aka}
        sid = new_id()
        summary, body = text_for(name, [], mems)
        live[sid] = {"name": name, "heat": 1, "mems": ids}
        ops.append({"op": "create", "scene_id": sid, "source_scene_ids": [], "name": name,
                    "summary": summary, "body": body, "memory_ids": ids})  # fmt: skip
    refresh = any(
        m["type"] == "instruction" or (m["type"] == "persona" and int(m["priority"]) >= 80)
        for m in changed
    )
    return ops, refresh
