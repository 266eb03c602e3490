"""L1: extract atomic memories from a session's new messages, then dedup each one.

One ``l1.extracted`` event per batch carries the cursor it covered and every
decision, so the cursor and the memories move together or not at all. A
batch is made of whole capture events (the cursor is an event position);
a capture event larger than the batch size is sent in several prompts but
still recorded as one event. Every prompt gets the few messages before it as
background, so nothing is extracted from a window of only the newest ten.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from memstore.derive.events import L1Extracted
from memstore.derive.memories import rules
from memstore.derive.prompts import (
    DEDUP_PROMPT_VERSION,
    EXTRACT_PROMPT_VERSION,
    DedupDecision,
    ExistingMemory,
    ExtractedMemory,
    PromptMessage,
    build_dedup_prompt,
    build_extract_prompt,
    validate_dedup,
    validate_extract,
)
from memstore.derive.queries import (
    Forgotten,
    L0Message,
    active_generation,
    background_messages,
    captures_exist,
    forgotten_memories,
    fts_memories,
    l1_cursor,
    memories,
    memories_by_id,
    pending_messages,
    resolve_generation,
)
from memstore.derive.runs import RunOutcome, append_checked, llm_client, new_id, record_failure
from memstore.errors import EmbeddingError, LLMError
from memstore.llm.client import LLMClient
from memstore.logtext import debug_detail, loggable
from memstore.timeutil import parse_when, to_iso

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

log = logging.getLogger("memstore.derive")

RELATED_LIMIT = 5
NEW_ROW_ACTIONS = ("store", "supersede", "merge")


def _group(pending: Sequence[L0Message], batch: int) -> list[list[L0Message]]:
    """Whole capture events, up to ``batch`` messages per group when possible."""
    events: list[list[L0Message]] = []
    for m in pending:
        if events and events[-1][0].position == m.position:
            events[-1].append(m)
        else:
            events.append([m])
    groups: list[list[L0Message]] = []
    for ev in events:
        if groups and len(groups[-1]) + len(ev) <= max(batch, 1):
            groups[-1].extend(ev)
        else:
            groups.append(list(ev))
    return groups


def _prompt_message(m: L0Message) -> PromptMessage:
    return PromptMessage(m.message_id, m.role, m.text, m.occurred_at)


@dataclass
class _Overlay:
    """Decisions already taken in this batch, not yet in the projection."""

    new: dict[str, ExistingMemory] = field(default_factory=dict)
    retired: set[str] = field(default_factory=set)
    rewritten: dict[str, str] = field(default_factory=dict)

    def view(self, found: Sequence[ExistingMemory], cand: str) -> list[ExistingMemory]:
        out = [
            ExistingMemory(
                e.id, self.rewritten.get(e.id, e.content), e.type, e.priority, e.scene_name
            )
            for e in found
            if e.id not in self.retired
        ]
        # Memories stored earlier in this batch are not searchable yet: compare by text.
        close = [e for e in self.new.values() if rules.similarity(cand, e.content) >= 0.3]
        return (close + [e for e in out if e.id not in self.new])[:RELATED_LIMIT]

    def record(self, d: dict[str, Any]) -> None:
        action, targets = d["action"], d["target_ids"]
        if action in NEW_ROW_ACTIONS:
            self.new[d["new_id"]] = ExistingMemory(
                d["new_id"], d["content"], d["type"], d["priority"], d["scene_name"]
            )
        if action in ("merge", "supersede"):
            self.retired.update(targets)
            for t in targets:
                self.new.pop(t, None)
        if action == "update" and targets:
            t = targets[0]
            self.rewritten[t] = d["content"]
            if t in self.new:
                old = self.new[t]
                self.new[t] = ExistingMemory(
                    t, d["content"], old.type, old.priority, old.scene_name
                )


def related_memories(
    store: DeriveContext, user_id: str, generation: int, query: str, limit: int = RELATED_LIMIT
) -> list[ExistingMemory]:
    """The user's live memories of ``generation`` closest to ``query``.

    For the active generation this is the store's hybrid search; other
    generations (a re-derive in progress) are not in the search index's
    filters, so they use the FTS index directly.
    """
    with store.db.read() as conn:
        active = active_generation(conn, user_id)
    if generation == active:
        ids = [str(h.ref) for h in store.search_memories(query, user_id=user_id, limit=limit)]
    else:
        with store.db.read() as conn:
            found = fts_memories(conn, user_id, generation, query, limit)
        ids = [mid for mid, _ in found]
    with store.db.read() as conn:
        rows = memories_by_id(conn, user_id, ids)
    out = []
    for mid in ids:
        r = rows.get(mid)
        if r is not None and r["status"] == "active" and int(r["generation"]) == generation:
            out.append(
                ExistingMemory(mid, r["content"], r["type"], int(r["priority"]), r["scene_name"])
            )
    return out


def _same_slot(
    conn: Connection, user_id: str, generation: int, content: str
) -> list[ExistingMemory]:
    slot = rules.slot_of(content)
    if slot is None:
        return []
    return [
        ExistingMemory(m["memory_id"], m["content"], m["type"], int(m["priority"]), m["scene_name"])
        for m in memories(conn, user_id, generation)
        if rules.slot_of(m["content"]) == slot
    ]


def _extract(
    client: LLMClient | None,
    store: DeriveContext,
    group: Sequence[L0Message],
    background: Sequence[L0Message],
) -> tuple[list[ExtractedMemory], str, dict[str, int] | None]:
    s = store.settings
    if client is None:
        return rules.extract(group, s.pipeline.l1_max_memories), "rules", None
    found: list[ExtractedMemory] = []
    usage: dict[str, int] = {}
    model = client.model
    size = max(s.pipeline.l1_batch_messages, 1)
    context = list(background)
    now = to_iso(store.clock())
    for start in range(0, len(group), size):
        chunk = list(group[start : start + size])
        allowed = {m.message_id for m in chunk}
        system, user = build_extract_prompt(
            [_prompt_message(m) for m in chunk],
            [_prompt_message(m) for m in context],
            now,
            s.pipeline.l1_max_memories,
        )

        def check(obj: object, allowed: set[str] = allowed) -> list[ExtractedMemory]:
            return validate_extract(obj, allowed, s.pipeline.l1_max_memories)

        res = client.complete_json(kind="l1_extract", system=system, user=user, validate=check)
        model = res.model
        for k, v in (res.usage or {}).items():
            usage[k] = usage.get(k, 0) + v
        user_ids = tuple(m.message_id for m in chunk if m.role == "user")
        for mem in res.value:
            if not mem.source_message_ids:  # provenance lost in validation: the batch
                mem = ExtractedMemory(
                    mem.content, mem.type, mem.priority, mem.scene_name, user_ids,
                    mem.activity_start, mem.activity_end,
                )  # fmt: skip
            found.append(mem)
        context = (
            chunk[-s.pipeline.l1_context_messages :] if s.pipeline.l1_context_messages > 0 else []
        )
    return found, model, usage or None


def forgotten_match(
    cand: ExtractedMemory,
    said_at: int,
    forgotten: Sequence[Forgotten],
    *,
    same_subject: bool,
) -> Forgotten | None:
    """The forgotten memory ``cand`` would bring back, if any.

    A candidate matches when its text equals a forgotten memory's (exactly or
    normalised) or, for the rules deriver (``same_subject``), when it is about
    the same subject (``rules.slot_of``) — but only when the message it comes
    from (log position ``said_at``) is older than the forget: what the user
    says again afterwards is new information.
    """
    key = rules.normalize(cand.content)
    slot = rules.slot_of(cand.content) if same_subject else None
    for f in forgotten:
        if said_at >= f.position:
            continue
        if f.content == cand.content or rules.normalize(f.content) == key:
            return f
        if slot is not None and rules.slot_of(f.content) == slot:
            return f
    return None


def _decide(
    client: LLMClient | None, cand: ExtractedMemory, related: Sequence[ExistingMemory]
) -> DedupDecision:
    if client is None:
        return rules.decide(cand, [(e.id, e.content) for e in related])
    system, user = build_dedup_prompt(cand, related)
    ids = {e.id for e in related}

    def check(obj: object) -> DedupDecision:
        return validate_dedup(obj, ids, cand)

    return client.complete_json(kind="l1_dedup", system=system, user=user, validate=check).value


def _decision(dec: DedupDecision, cand: ExtractedMemory, times: dict[str, str]) -> dict[str, Any]:
    stamps = [times[i] for i in cand.source_message_ids if i in times]
    return {
        "action": dec.action,
        "new_id": new_id(),
        "target_ids": list(dec.target_ids),
        "content": dec.content,
        "type": dec.type,
        "priority": dec.priority,
        "scene_name": dec.scene_name,
        "source_message_ids": list(cand.source_message_ids),
        "activity_start": cand.activity_start,
        "activity_end": cand.activity_end,
        "occurred_at": max(stamps) if stamps else None,
        "candidate": cand.content,
        "reason": dec.reason,
        "degraded_from": dec.degraded_from,
    }


def _forgotten_skip(cand: ExtractedMemory, f: Forgotten) -> DedupDecision:
    return DedupDecision(
        action="skip",
        target_ids=(f.memory_id,),
        content="",
        type=cand.type,
        priority=cand.priority,
        scene_name=cand.scene_name,
        reason="forgotten",
    )


def _decisions(
    client: LLMClient | None,
    store: DeriveContext,
    user_id: str,
    generation: int,
    candidates: Sequence[ExtractedMemory],
    group: Sequence[L0Message],
    forgotten: Sequence[Forgotten],
) -> list[dict[str, Any]]:
    overlay = _Overlay()
    out: list[dict[str, Any]] = []
    times = {m.message_id: m.occurred_at for m in group}
    positions = {m.message_id: m.position for m in group}
    for cand in candidates:
        said_at = max(
            (positions[i] for i in cand.source_message_ids if i in positions),
            default=group[-1].position,
        )
        gone = forgotten_match(cand, said_at, forgotten, same_subject=client is None)
        if gone is not None:  # the user asked to forget this: do not derive it again
            out.append(_decision(_forgotten_skip(cand, gone), cand, times))
            continue
        found = related_memories(store, user_id, generation, cand.content)
        if client is None:
            with store.db.read() as conn:
                extra = _same_slot(conn, user_id, generation, cand.content)
            found = found + [e for e in extra if e.id not in {f.id for f in found}]
        related = overlay.view(found, cand.content)
        exact = [e for e in related if rules.normalize(e.content) == rules.normalize(cand.content)]
        if exact:  # obviously identical: no model call needed
            dec = rules.decide(cand, [(exact[0].id, exact[0].content)])
        elif not related:
            dec = rules.decide(cand, [])
        else:
            dec = _decide(client, cand, related)
        d = _decision(dec, cand, times)
        overlay.record(d)
        out.append(d)
    return out


def run_l1(
    store: DeriveContext, user_id: str, session_id: str, *, generation: int | None = None
) -> RunOutcome:
    """Extract and dedup everything captured in the session after its cursor.

    Candidates that would bring back a memory the user asked to forget (from
    messages older than the request) are recorded as ``skip`` decisions with
    reason ``forgotten``; this is what keeps a forget through a re-derive.
    """
    run_id = new_id()
    s = store.settings
    with store.db.read() as conn:
        since = store.log.last_position(conn)
        gen = resolve_generation(conn, user_id, generation)
        cursor = l1_cursor(conn, user_id, session_id, gen)
        pending = pending_messages(conn, user_id, session_id, cursor)
        forgotten = forgotten_memories(conn, user_id) if pending else []
    client = llm_client(store)
    appended = new_memories = 0
    for group in _group(pending, s.pipeline.l1_batch_messages):
        try:
            with store.db.read() as conn:
                background = background_messages(
                    conn, user_id, session_id, group[0].row_id, s.pipeline.l1_context_messages
                )
            candidates, model, usage = _extract(client, store, group, background)
            decisions = _decisions(client, store, user_id, gen, candidates, group, forgotten)
        except (LLMError, EmbeddingError) as exc:
            log.warning(
                "l1 run %s for %s/%s failed: %s", run_id, user_id, session_id, loggable(exc)
            )
            debug_detail(log, f"l1 run {run_id}", exc)
            failed = record_failure(store, user_id, "l1", session_id, run_id, exc, gen, since=since)
            appended += failed.events_appended
            return RunOutcome("l1", False, run_id, appended, new_memories, error=failed.error)
        event = L1Extracted(
            session_id=session_id,
            run_id=run_id,
            generation=gen,
            deriver="rules" if client is None else client.deriver,
            model=model,
            prompt_version=rules.RULES_VERSION
            if client is None
            else f"{EXTRACT_PROMPT_VERSION}+{DEDUP_PROMPT_VERSION}",
            cursor_position=group[-1].position,
            message_ids=[m.message_id for m in group],
            decisions=decisions,
            usage=usage,
        )
        expected = cursor
        sources = {m.position for m in group}

        def unchanged(
            conn: Connection, expected: int = expected, sources: set[int] = sources
        ) -> bool:
            # Same cursor (no other worker covered the batch) and the batch's
            # messages are still the user's (not erased meanwhile).
            return l1_cursor(conn, user_id, session_id, gen) == expected and captures_exist(
                conn, user_id, session_id, sources
            )

        stored = append_checked(
            store,
            user_id,
            [event],
            since=since,
            occurred_at=parse_when(max(m.occurred_at for m in group)),
            check=unchanged,
        )
        if stored is None:
            log.info(
                "l1 run %s: session %s/%s advanced by another worker or erased",
                run_id,
                user_id,
                session_id,
            )
            break
        cursor = group[-1].position
        appended += 1
        new_memories += sum(1 for d in decisions if d["action"] in NEW_ROW_ACTIONS)
    return RunOutcome("l1", True, run_id, appended, new_memories)
