"""Recall: what a host injects before a turn, in two parts, within one budget.

The **stable** part — persona, standing instructions (priority -1), scene
navigation — changes rarely and belongs in a system prompt (providers cache
it). The **per-turn** part ranks the user's L1 memories and L0 messages
(excerpts with their date and speaker) on one relevance scale
(``recall_rank``), drops what falls below the gate, never repeats a message a
recalled memory already stands for, and spends what the stable part left of
the budget best-first, each item capped (long messages clipped around the
part that matches). An off-topic question injects nothing per turn.

Persona, instructions and navigation come from small projection rows and
are always ready; the per-turn part needs searches (an embedding, KNN), so
it runs in a worker thread and the caller waits at most ``timeout_s``. On
timeout the answer is the stable part alone, flagged ``timed_out``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from memstore.derive.context import RECALL_WORKER_SLOTS
from memstore.derive.queries import active_generation, persona, scenes, standing_instructions
from memstore.logtext import debug_detail, loggable
from memstore.recall.query import off_topic
from memstore.recall.rank import Candidate, collect, neighbours
from memstore.recall.text import (
    WORD_RE,
    block,
    block_overhead,
    clip_around,
    fit_lines,
    join_blocks,
    safe,
)
from memstore.text import truncate_chars
from memstore.text.fts import STOP_WORDS

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

log = logging.getLogger("memstore.recall")

PERSONA_TAG = "user-persona"
INSTRUCTIONS_TAG = "standing-instructions"
NAVIGATION_TAG = "scene-navigation"
MEMORIES_TAG = "relevant-memories"
EXCERPTS_TAG = "conversation-excerpts"
STABLE_SHARE = 0.3  # of the budget the stable part may take (persona, instructions, navigation)
MIN_PERSONA_CHARS = 40  # below this a cut persona says nothing useful
ITEM_CAP_CHARS = 600  # one memory or message line at most
CONTEXT_CAP_CHARS = 240  # a neighbouring turn shown to make sense of a hit
MIN_ITEM_CHARS = 60  # a clipped item shorter than this says nothing useful
EXPLAINS = 0.8  # see per_turn_part
SHORT_REPLY_CHARS = 80  # a hit this short is shown with the turn it answers
REPEAT_SHARE = 0.8  # see repeats
MAX_STANDING_INSTRUCTIONS = 5
# Search workers one store may have running at once. A worker past its
# deadline keeps its slot until it ends, so a hung embedder costs at most
# this many threads; further recalls answer without the per-turn part.
MAX_RECALL_WORKERS = RECALL_WORKER_SLOTS


@dataclass(frozen=True)
class RecalledMemory:
    """An L1 memory that recall injected."""

    memory_id: str
    type: str
    content: str
    scene: str
    priority: int
    source_message_ids: tuple[str, ...]
    activity_start: str | None
    activity_end: str | None
    relevance: float  # on the gate's scale; standing instructions: 1.0
    standing: bool  # a priority -1 instruction (stable part)
    line: str  # as injected


@dataclass(frozen=True)
class RecalledMessage:
    """An L0 message (an excerpt of the conversation) that recall injected."""

    message_id: str
    session_id: str
    occurred_at: str
    role: str
    speaker: str | None
    text: str  # as injected: clipped around the match when long
    clipped: bool
    relevance: float
    context_for: str | None = None  # shown to make sense of this message id


@dataclass(frozen=True)
class Recall:
    text: str  # stable + per-turn, for hosts that inject one block
    stable: str  # persona, standing instructions, navigation
    per_turn: str  # memories and excerpts for this query
    persona: str
    navigation: str
    memories: list[RecalledMemory]  # standing instructions first, then by relevance
    messages: list[RecalledMessage]
    truncated: bool
    timed_out: bool
    gated: int = 0  # candidates the relevance gate dropped


def navigation_text(scene_rows: Sequence[Mapping[str, Any]]) -> str:
    """Scenes by heat, one line each: composed at read time, never stored."""
    return "\n".join(f"- {s['name']} (heat {s['heat']}): {s['summary']}" for s in scene_rows)


def memory_line(m: dict[str, Any]) -> str:
    tags = [m["type"]]
    if m.get("scene_name"):
        tags.append(m["scene_name"])
    when = m.get("activity_start")
    if when:
        end = m.get("activity_end")
        tags.append(f"{when}–{end}" if end and end != when else when)
    return f"- [{' · '.join(tags)}] {m['content']}"


def _when(occurred_at: str) -> str:
    # "2023-05-08T13:56:00+00:00" → "2023-05-08 13:56": the date is what
    # temporal questions need, seconds and zone are noise.
    return occurred_at[:16].replace("T", " ")


def message_head(row: dict[str, Any]) -> str:
    who = f"{row['speaker']}, {row['role']}" if row.get("speaker") else str(row["role"])
    return f"[{_when(str(row['occurred_at']))} · {who}]"


def _record(m: dict[str, Any], relevance: float, standing: bool, line: str) -> RecalledMemory:
    return RecalledMemory(
        memory_id=str(m["memory_id"]),
        type=str(m["type"]),
        content=str(m["content"]),
        scene=str(m.get("scene_name") or ""),
        priority=int(m["priority"]),
        source_message_ids=tuple(str(s) for s in m.get("source_message_ids") or ()),
        activity_start=m.get("activity_start"),
        activity_end=m.get("activity_end"),
        relevance=relevance,
        standing=standing,
        line=line,
    )


# -- the stable part ---------------------------------------------------------------


@dataclass(frozen=True)
class Stable:
    text: str
    persona: str
    navigation: str
    instructions: list[RecalledMemory]
    truncated: bool


def stable_part(store: DeriveContext, user_id: str, budget: int) -> Stable:
    """Persona, standing instructions and navigation within ``budget``:
    instructions first (they say how to work at all), then the persona, then
    as many navigation lines as fit."""
    with store.db.read() as conn:
        gen = active_generation(conn, user_id)
        row = persona(conn, user_id, gen)
        nav = navigation_text(scenes(conn, user_id, gen))
        standing = standing_instructions(conn, user_id, gen, MAX_STANDING_INSTRUCTIONS)
    persona_text = str(row["persona"]) if row else ""
    truncated = False
    used = 0
    instr: list[RecalledMemory] = []
    lines: list[str] = []
    for m in standing:
        line, cut = clip_around(safe(memory_line(m)), "", ITEM_CAP_CHARS)
        cost = len(line) + 1 + (0 if lines else block_overhead(INSTRUCTIONS_TAG))
        if used + cost > budget:
            truncated = True
            continue
        truncated |= cut
        used += cost
        lines.append(line)
        instr.append(_record(m, 1.0, True, line))
    instr_block = block(INSTRUCTIONS_TAG, lines) if lines else ""
    persona_block = ""
    if persona_text:
        room = budget - used - block_overhead(PERSONA_TAG)
        if room >= min(MIN_PERSONA_CHARS, len(persona_text)):
            whole = safe(persona_text)
            cut_text = truncate_chars(whole, room)
            truncated |= cut_text != whole
            persona_block = block(PERSONA_TAG, [cut_text])
            used += len(persona_block) + 1
        else:
            truncated = True
    nav_block = ""
    nav_lines = [safe(x) for x in nav.splitlines() if x]
    if nav_lines:
        kept = fit_lines(nav_lines, budget - used - block_overhead(NAVIGATION_TAG))
        truncated |= len(kept) < len(nav_lines)
        if kept:
            nav_block = block(NAVIGATION_TAG, kept)
    text_ = join_blocks((persona_block, instr_block, nav_block))
    return Stable(text_, persona_text, nav, instr, truncated)


# -- the per-turn part ---------------------------------------------------------------


def context_side(row: dict[str, Any]) -> bool | None:
    """Which turn is needed to make sense of a hit: a question is answered by
    the next turn (False); a short reply needs the turn it answers (True,
    the previous one); None: the hit stands alone."""
    body = str(row["text"]).rstrip()
    if body.endswith("?"):
        return False
    if len(body) < SHORT_REPLY_CHARS:
        return True
    return None


def content_words(text_: str) -> frozenset[str]:
    return frozenset(w for w in WORD_RE.findall(text_.casefold()) if w not in STOP_WORDS)


def repeats(words: frozenset[str], said: Sequence[frozenset[str]]) -> bool:
    """Most of ``words`` (``REPEAT_SHARE``) are in one item already injected:
    a near-duplicate ("The user likes green tea." after "I like green tea,
    never coffee after noon") spends characters and adds no evidence."""
    if len(words) < 2:
        return False
    need = REPEAT_SHARE * len(words)
    return any(len(words & w) >= need for w in said)


def per_turn_part(
    store: DeriveContext,
    query: str,
    cands: list[Candidate],
    budget: int,
    threshold: float,
) -> tuple[str, list[RecalledMemory], list[RecalledMessage], bool, int]:
    """Spend ``budget`` on the gated candidates, best first.

    A message is not repeated when a memory made from it is injected (or is a
    standing instruction, in the stable part) and explains the match: its own
    relevance is at least ``EXPLAINS`` of the message's. A message that says
    more than its memories ("I adopted a greyhound called Pixel. Always
    answer in French." behind the instruction) is still shown."""
    # Sources a memory explains, with how relevant that memory is by itself.
    explained: dict[str, float] = {}

    def explain(c: Candidate) -> None:
        for src in c.row.get("source_message_ids") or ():
            explained[str(src)] = max(explained.get(str(src), 0.0), c.own)

    for c in cands:
        if c.standing:
            explain(c)
    live = [c for c in cands if not c.standing]
    gated = [] if off_topic(query, cands) else [c for c in live if c.relevance >= threshold]
    dropped = len(live) - len(gated)
    mem_lines: list[str] = []
    msg_lines: list[str] = []
    memories: list[RecalledMemory] = []
    messages: list[RecalledMessage] = []
    shown: set[str] = set()  # message ids injected
    # Content words of what is injected, by kind: a message is compared with
    # messages only, since whether a memory explains its source is decided
    # below (EXPLAINS), and such a message may be shown with the turn next to it.
    said: dict[str, list[frozenset[str]]] = {"memory": [], "message": []}
    used = 0
    truncated = False
    # Every neighbouring turn that may be shown, looked up in one query.
    sides = {
        c.rowid: side
        for c in gated
        if c.kind == "message" and (side := context_side(c.row)) is not None
    }
    if sides:
        with store.db.read() as conn:
            contexts = neighbours(conn, sides)
    else:
        contexts = {}
    for c in gated:
        if used >= budget - MIN_ITEM_CHARS:
            truncated = True
            break
        words = content_words(c.text)
        if repeats(words, said[c.kind]):
            continue
        if c.kind == "memory":
            if len(memories) >= store.settings.recall.limit:
                continue
            first = not mem_lines
            over = block_overhead(MEMORIES_TAG) if first else 1
            cap = min(ITEM_CAP_CHARS, budget - used - over)
            if cap < MIN_ITEM_CHARS:
                truncated = True
                continue
            line, cut = clip_around(safe(memory_line(c.row)), query, cap)
            truncated |= cut
            used += len(line) + over
            mem_lines.append(line)
            said["memory"].append(words)
            memories.append(_record(c.row, round(c.relevance, 4), False, line))
            explain(c)
            continue
        if c.ref in shown or explained.get(c.ref, -1.0) >= EXPLAINS * c.relevance:
            continue
        first = not msg_lines
        over = block_overhead(EXCERPTS_TAG) if first else 1
        head = message_head(c.row)
        cap = min(ITEM_CAP_CHARS, budget - used - over) - len(head) - 3
        if cap < MIN_ITEM_CHARS:
            truncated = True
            continue
        body, cut = clip_around(safe(str(c.row["text"])), query, cap)
        truncated |= cut
        line = f"- {head} {body}"
        ctx = contexts.get(c.rowid)
        ctx_line = ""
        ctx_rec: RecalledMessage | None = None
        if ctx is not None and ctx["message_id"] not in shown:
            ctx_head = message_head(ctx)
            room = min(CONTEXT_CAP_CHARS, budget - used - over - len(line) - 1) - len(ctx_head) - 5
            if room >= MIN_ITEM_CHARS // 2:
                ctx_body, ctx_cut = clip_around(safe(str(ctx["text"])), query, room)
                ctx_line = f"  ↳ {ctx_head} {ctx_body}"
                ctx_rec = _message_record(ctx, ctx_body, ctx_cut, c.relevance, c.ref)
        entry = line + ("\n" + ctx_line if ctx_line else "")
        used += len(entry) + over
        msg_lines.append(entry)
        said["message"].append(words)
        shown.add(c.ref)
        messages.append(_message_record(c.row, body, cut, c.relevance, None))
        if ctx_rec is not None:
            shown.add(ctx_rec.message_id)
            messages.append(ctx_rec)
    out = join_blocks(
        (
            block(MEMORIES_TAG, mem_lines) if mem_lines else "",
            block(EXCERPTS_TAG, msg_lines) if msg_lines else "",
        )
    )
    if len(out) > budget:  # a safety net: the accounting above is exact
        out = truncate_chars(out, budget)
        truncated = True
    return out, memories, messages, truncated, dropped


def _message_record(
    row: dict[str, Any], body: str, clipped: bool, relevance: float, context_for: str | None
) -> RecalledMessage:
    return RecalledMessage(
        message_id=str(row["message_id"]),
        session_id=str(row["session_id"]),
        occurred_at=str(row["occurred_at"]),
        role=str(row["role"]),
        speaker=row.get("speaker"),
        text=body,
        clipped=clipped,
        relevance=round(float(relevance), 4),
        context_for=context_for,
    )


# -- the deadline -----------------------------------------------------------------------


def _collect_with_deadline(
    store: DeriveContext,
    query: str,
    user_id: str,
    session_id: str | None,
    skip: set[str],
    timeout_s: float,
    speaker: str | None = None,
) -> list[Candidate] | None:
    """The scored candidates, or None when the searches did not finish in
    time (or every worker slot is taken by searches that did not finish)."""
    slots = store.recall_slots  # per store: a slow store must not starve another
    if not slots.acquire(blocking=False):
        log.warning(
            "recall: %d searches still running for this store; answering without memories",
            MAX_RECALL_WORKERS,
        )
        return None
    box: queue.Queue[list[Candidate] | BaseException] = queue.Queue(maxsize=1)

    def work() -> None:
        try:
            box.put(collect(store, query, user_id, session_id, skip, speaker))
        except Exception as exc:  # any failure goes back to the caller, now
            box.put(exc)
        finally:
            slots.release()

    # A daemon thread, not a pool: a search stuck past the deadline must not
    # hold up interpreter exit; it finishes (or fails) on its own.
    try:
        threading.Thread(target=work, name="memstore-recall", daemon=True).start()
    except BaseException:
        slots.release()
        raise
    try:
        got = box.get(timeout=max(timeout_s, 0.0))
    except queue.Empty:
        return None
    if isinstance(got, BaseException):
        log.warning("recall search failed, answering without memories: %s", loggable(got))
        debug_detail(log, "recall search", got)
        return []
    return got


class RecallOptions(TypedDict, total=False):
    """``recall``'s optional arguments (``Store.recall`` documents them)."""

    session_id: str | None
    budget_chars: int | None
    timeout_s: float | None
    threshold: float | None
    speaker: str | None


def recall(
    store: DeriveContext, query: str, *, user_id: str, **options: Unpack[RecallOptions]
) -> Recall:
    """What to inject before the user's next turn for ``query``.

    ``budget_chars`` bounds ``text`` (stable + per-turn); the stable part
    takes at most ``STABLE_SHARE`` of it, so it does not depend on the query.
    ``session_id`` (the current session) keeps its own messages out of the
    excerpts. ``threshold`` overrides the ``recall_threshold`` setting.
    ``speaker``: only that participant's messages (the messages' ``name``)
    and the memories made from them.
    """
    session_id = options.get("session_id")
    budget_chars = options.get("budget_chars")
    timeout_s = options.get("timeout_s")
    threshold = options.get("threshold")
    s = store.settings
    budget = s.recall.budget_chars if budget_chars is None else max(int(budget_chars), 0)
    timeout = s.recall.timeout_s if timeout_s is None else float(timeout_s)
    gate = s.recall.threshold if threshold is None else float(threshold)
    if query.strip() and budget >= MIN_ITEM_CHARS:
        # The query embedding (native code, no GIL) runs while the stable
        # part is read and the keyword searches run; the vector searches
        # wait only for what is left of it.
        store.search_engine.prefetch_query(query)
    stable = stable_part(store, user_id, int(budget * STABLE_SHARE))
    room = budget - len(stable.text) - (1 if stable.text else 0)
    found: list[Candidate] | None = []
    if query.strip() and room >= MIN_ITEM_CHARS:
        skip = {m.memory_id for m in stable.instructions}
        found = _collect_with_deadline(
            store, query, user_id, session_id, skip, timeout, options.get("speaker")
        )
    per_turn, mems, msgs, cut, dropped = per_turn_part(store, query, found or [], room, gate)
    return Recall(
        text=join_blocks((stable.text, per_turn)),
        stable=stable.text,
        per_turn=per_turn,
        persona=stable.persona,
        navigation=stable.navigation,
        memories=[*stable.instructions, *mems],
        messages=msgs,
        truncated=stable.truncated or cut,
        timed_out=found is None,
        gated=dropped,
    )
