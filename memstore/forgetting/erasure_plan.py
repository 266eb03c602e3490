"""Which events an erasure of part of a user's data deletes or rewrites.

A pure function of the user's events: the messages chosen (by id, session,
time range, or as the sources of a memory) are cut out of their capture
events, and everything whose text came from them goes too:

- a memory any of whose source messages is erased (its text may quote one),
  a memory merged from or updated in place over such a memory, and every
  generation's copy (``<id>@<generation>``) of one; the decisions that wrote
  them are dropped from their extraction events (a skipped candidate that
  duplicated one too), and a forget of one is deleted;
- every scene operation whose text may hold such a memory (the rule: ``L2
  op_sources``), with the whole family of scenes it was merged with: their
  operations are all dropped, and the erasure re-places their surviving
  memories (``memstore.derive.follow.replace_lost``);
- every persona version built from such a memory, or not known to be free
  of one (written before personas recorded their sources);
- the error text of the user's failed runs (it may quote a model's answer):
  only the kind of error stays.

Extraction and scene events themselves stay (with what is left in them):
their cursors say how far derivation got, so nothing is derived twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from memstore.derive.events import (
    GenerationStarted,
    L1Extracted,
    MemoryForgotten,
    MemoryWritten,
    PersonaUpdated,
    RunFailed,
    ScenesUpdated,
)
from memstore.derive.messages.events import MessagesCaptured, SessionEnded
from memstore.derive.scenes.projection import op_sources
from memstore.events.log import StoredEvent
from memstore.events.types import Event

GRAINS = ("messages", "session", "memory", "between")


@dataclass(frozen=True)
class Selection:
    """What to erase of one user. ``start``/``end``: stored ISO instants,
    ``start`` included, ``end`` not. ``with_sources`` (memory grain): the
    memories' source messages go too. ``messages_only``: the chosen messages
    go, the memories extracted from them stay (retention of L0 alone)."""

    grain: str
    message_ids: frozenset[str] = frozenset()
    session_id: str | None = None
    memory_ids: frozenset[str] = frozenset()
    start: str | None = None
    end: str | None = None
    with_sources: bool = True
    messages_only: bool = False


@dataclass
class Plan:
    delete: list[int] = field(default_factory=list)  # event positions
    rewrite: dict[int, Event] = field(default_factory=dict)  # position -> payload
    messages: set[tuple[str, str]] = field(default_factory=set)  # (session, message id)
    memories: set[str] = field(default_factory=set)
    scenes: set[str] = field(default_factory=set)
    personas: int = 0
    texts: set[str] = field(default_factory=set)  # every erased text (embedding cache keys)

    @property
    def empty(self) -> bool:
        return not (self.delete or self.rewrite)


def lineage(item_id: str) -> list[str]:
    """``a@2@3`` -> ``["a@2@3", "a@2", "a"]``: a copy and what it was copied from."""
    out = [item_id]
    while "@" in item_id:
        item_id = item_id.rpartition("@")[0]
        out.append(item_id)
    return out


def _hit(ids: Collection[str], marked: set[str]) -> bool:
    return any(a in marked for i in ids for a in lineage(i))


def _decisions(p: Event) -> list[dict[str, Any]]:
    if isinstance(p, L1Extracted):
        return list(p.decisions)
    if isinstance(p, MemoryWritten):
        return [p.decision]
    return []


def _memory_sources(events: Sequence[StoredEvent]) -> dict[str, set[str]]:
    """Each memory's source message ids, as the L1 projection unions them."""
    src: dict[str, set[str]] = {}
    for ev in events:
        p = ev.payload
        if isinstance(p, GenerationStarted):
            for mid in list(src):
                if "@" not in mid or mid.rpartition("@")[2] != str(p.generation):
                    src.setdefault(f"{mid}@{p.generation}", set(src[mid]))
        for d in _decisions(p):
            own = set(d.get("source_message_ids", []))
            targets = list(d.get("target_ids", []))
            if d["action"] == "update" and targets:
                src.setdefault(targets[0], set()).update(own)
            elif d["action"] == "merge":
                src[d["new_id"]] = own.union(*(src.get(t, set()) for t in targets))
            elif d["action"] != "skip":
                src[d["new_id"]] = own
    return src


def _chosen_messages(events: Sequence[StoredEvent], sel: Selection) -> set[str]:
    out: set[str] = set()
    for ev in events:
        p = ev.payload
        if not isinstance(p, MessagesCaptured):
            continue
        for m in p.messages:
            if (
                (sel.grain == "messages" and m["id"] in sel.message_ids)
                or (sel.grain == "session" and p.session_id == sel.session_id)
                or (sel.grain == "between" and _in_range(str(m["occurred_at"]), sel))
            ):
                out.add(str(m["id"]))
    return out


def _in_range(when: str, sel: Selection) -> bool:
    return (sel.start is None or when >= sel.start) and (sel.end is None or when < sel.end)


def plan(events: Sequence[StoredEvent], sel: Selection) -> Plan:
    """What erasing ``sel`` does to ``events`` (one user's, in log order)."""
    out = Plan()
    gone_msgs = _chosen_messages(events, sel)
    tainted: set[str] = {a for m in sel.memory_ids for a in lineage(m)}
    if sel.grain == "memory" and sel.with_sources:
        sources = _memory_sources(events)
        for mid, msgs in sources.items():
            if _hit([mid], tainted):
                gone_msgs |= msgs
    # Memories, in log order: a taint only flows to later decisions.
    by_source = set() if sel.messages_only else gone_msgs
    for ev in events:
        p = ev.payload
        direct = (
            sel.grain == "between"
            and isinstance(p, MemoryWritten)
            and _in_range(ev.occurred_at, sel)
        )
        for d in _decisions(p):
            targets = list(d.get("target_ids", []))
            own = set(d.get("source_message_ids", []))
            action = d["action"]
            made = targets[0] if action == "update" and targets else d["new_id"]
            if (
                (direct and not sel.messages_only)
                or own & by_source
                or _hit([made], tainted)
                or (action in ("update", "merge") and _hit(targets, tainted))
            ) and action != "skip":
                tainted.add(made)
    out.memories = tainted
    _plan_l0(events, sel, gone_msgs, out)
    _plan_l1(events, by_source, tainted, out)
    _plan_scenes(events, tainted, out)
    _plan_persona(events, tainted, out)
    if not (out.empty and not out.memories):
        _plan_failures(events, out)
    out.delete.sort()
    return out


def _plan_l0(events: Sequence[StoredEvent], sel: Selection, gone: set[str], out: Plan) -> None:
    for ev in events:
        p = ev.payload
        ended = isinstance(p, SessionEnded) and p.session_id == sel.session_id
        if ended and sel.grain == "session":
            out.delete.append(ev.position)
        if not isinstance(p, MessagesCaptured):
            continue
        keep = [m for m in p.messages if m["id"] not in gone]
        if len(keep) == len(p.messages):
            continue
        for m in p.messages:
            if m["id"] in gone:
                out.messages.add((p.session_id, str(m["id"])))
                out.texts.add(str(m["text"]))
        if keep:
            out.rewrite[ev.position] = dataclasses.replace(p, messages=keep)
        else:
            out.delete.append(ev.position)


def _plan_l1(
    events: Sequence[StoredEvent], gone_msgs: set[str], tainted: set[str], out: Plan
) -> None:
    for ev in events:
        p = ev.payload
        if isinstance(p, MemoryForgotten):
            if _hit([p.memory_id], tainted):
                out.delete.append(ev.position)
            continue
        if not isinstance(p, L1Extracted | MemoryWritten):
            continue
        kept: list[dict[str, Any]] = []
        changed = False
        for d in _decisions(p):
            targets = list(d.get("target_ids", []))
            made = targets[0] if d["action"] == "update" and targets else d["new_id"]
            own = set(d.get("source_message_ids", []))
            if (
                _hit([made], tainted)
                or own & gone_msgs
                or (d["action"] in ("update", "merge", "skip") and _hit(targets, tainted))
            ):
                out.texts.update(str(d.get(k) or "") for k in ("content", "candidate"))
                changed = True
                continue
            if _hit(targets, tainted):  # a supersede: it replaced the erased fact
                d = {**d, "target_ids": [t for t in targets if not _hit([t], tainted)]}
                changed = True
            kept.append(d)
        if isinstance(p, MemoryWritten):
            if changed and not kept:
                out.delete.append(ev.position)
            elif changed:
                out.rewrite[ev.position] = dataclasses.replace(p, decision=kept[0])
            continue
        ids = [m for m in p.message_ids if m not in gone_msgs]
        if changed or len(ids) != len(p.message_ids):
            out.rewrite[ev.position] = dataclasses.replace(p, decisions=kept, message_ids=ids)


def _families(events: Sequence[StoredEvent]) -> dict[str, str]:
    """Scene id -> a representative of the scenes merged with it (union-find)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = lineage(x)[-1]
        parent.setdefault(root, root)
        while parent[root] != root:
            root = parent[root]
        return root

    for ev in events:
        p = ev.payload
        if isinstance(p, ScenesUpdated):
            for op in p.operations:
                for s in op.get("source_scene_ids", []) or []:
                    parent[find(s)] = find(str(op["scene_id"]))
    return {k: find(k) for k in list(parent)}


def _plan_scenes(events: Sequence[StoredEvent], tainted: set[str], out: Plan) -> None:
    fam = _families(events)

    def family(scene_id: str) -> str:
        return fam.get(lineage(scene_id)[-1], lineage(scene_id)[-1])

    bad: set[str] = set()
    for ev in events:
        p = ev.payload
        if isinstance(p, ScenesUpdated):
            for op in p.operations:
                if _hit(op_sources(p, op), tainted):
                    bad.add(family(str(op["scene_id"])))
    for ev in events:
        p = ev.payload
        if not isinstance(p, ScenesUpdated):
            continue
        kept = []
        for op in p.operations:
            ids = [str(op["scene_id"]), *(op.get("source_scene_ids", []) or [])]
            if any(family(s) in bad for s in ids):
                out.scenes.update(ids)
                out.texts.update(str(op.get(k) or "") for k in ("name", "summary", "body"))
            else:
                kept.append(op)
        chunk = [m for m in p.memory_ids if not _hit([m], tainted)]
        if len(kept) != len(p.operations) or len(chunk) != len(p.memory_ids):
            # An LLM's notes may quote any memory of the run's chunk.
            out.rewrite[ev.position] = dataclasses.replace(
                p, operations=kept, memory_ids=chunk, notes=[]
            )


def _plan_failures(events: Sequence[StoredEvent], out: Plan) -> None:
    """A failed run's error may quote what the model answered about any of
    the user's text: only the kind of error is kept."""
    for ev in events:
        p = ev.payload
        if isinstance(p, RunFailed):
            kind = p.error.split(":", 1)[0][:100]
            if kind != p.error:
                out.rewrite[ev.position] = dataclasses.replace(p, error=kind)


def _plan_persona(events: Sequence[StoredEvent], tainted: set[str], out: Plan) -> None:
    for ev in events:
        p = ev.payload
        if isinstance(p, PersonaUpdated) and (p.memory_ids is None or _hit(p.memory_ids, tainted)):
            out.delete.append(ev.position)
            out.personas += 1
            out.texts.add(p.persona)


__all__ = ["GRAINS", "Plan", "Selection", "lineage", "plan"]
