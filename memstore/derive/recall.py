"""Recall: the text a host injects before a turn, within a budget and a deadline.

Persona and scene navigation come from small projection rows and are always
ready; the relevant memories need a search (an embedding, a KNN query), so
that runs in a worker thread and the caller waits at most ``timeout_s``. On
timeout the answer is persona + navigation, flagged ``timed_out``.
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memstore.derive.state import (
    active_generation,
    memories_by_id,
    persona,
    scenes,
    standing_instructions,
)
from memstore.text import escape_injection, truncate_chars

if TYPE_CHECKING:
    from memstore.store import Store

log = logging.getLogger("memstore.recall")

PERSONA_TAG = "user-persona"
NAVIGATION_TAG = "scene-navigation"
MEMORIES_TAG = "relevant-memories"
PERSONA_SHARE = 0.4  # of the budget persona may keep when memories compete for it
NAVIGATION_SHARE = 0.2
MIN_PERSONA_CHARS = 40  # below this a cut persona says nothing useful
# Search workers one store may have running at once. A worker past its
# deadline keeps its slot until it ends, so a hung embedder costs at most
# this many threads; further recalls answer without memories meanwhile.
MAX_RECALL_WORKERS = 4


@dataclass(frozen=True)
class Recall:
    text: str
    persona: str
    navigation: str
    memories: list[dict[str, Any]]
    truncated: bool
    timed_out: bool


def navigation_text(scene_rows: list[dict[str, Any]]) -> str:
    """Scenes by heat, one line each: composed at read time, never stored."""
    return "\n".join(f"- {s['name']} (heat {s['heat']}): {s['summary']}" for s in scene_rows)


MAX_STANDING_INSTRUCTIONS = 5


def memory_line(m: dict[str, Any]) -> str:
    tags = [m["type"]]
    if m.get("scene_name"):
        tags.append(m["scene_name"])
    when = m.get("activity_start")
    if when:
        end = m.get("activity_end")
        tags.append(f"{when}–{end}" if end and end != when else when)
    return f"- [{' · '.join(tags)}] {m['content']}"


def search_memories(store: Store, query: str, user_id: str, limit: int) -> list[dict[str, Any]]:
    """Live memories of the active generation for ``query``, best first, with ``score``."""
    with store.db.read() as conn:
        gen = active_generation(conn, user_id)
    hits = store.search_memories(query, user_id=user_id, limit=limit)
    scored = [(str(h.ref), float(h.score)) for h in hits]
    with store.db.read() as conn:
        rows_by_id = memories_by_id(conn, user_id, [mid for mid, _ in scored])
    out = []
    for mid, score in scored:
        m = rows_by_id.get(mid)
        if m is not None and m["status"] == "active" and int(m["generation"]) == gen:
            out.append({**m, "score": score})
    return out


_slots: weakref.WeakKeyDictionary[Store, threading.BoundedSemaphore] = weakref.WeakKeyDictionary()
_slots_lock = threading.Lock()


def _worker_slots(store: Store) -> threading.BoundedSemaphore:
    with _slots_lock:
        sem = _slots.get(store)
        if sem is None:
            sem = threading.BoundedSemaphore(MAX_RECALL_WORKERS)
            _slots[store] = sem
        return sem


def _search_with_deadline(
    store: Store, query: str, user_id: str, limit: int, timeout_s: float
) -> list[dict[str, Any]] | None:
    """The search result, or None when it did not finish in time (or every
    worker slot is taken by searches that did not finish)."""
    slots = _worker_slots(store)
    if not slots.acquire(blocking=False):
        log.warning(
            "recall: %d searches still running for this store; answering without memories",
            MAX_RECALL_WORKERS,
        )
        return None
    box: queue.Queue[list[dict[str, Any]] | BaseException] = queue.Queue(maxsize=1)

    def work() -> None:
        try:
            box.put(search_memories(store, query, user_id, limit))
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
        log.warning(
            "recall search failed, answering without memories: %s: %s", type(got).__name__, got
        )
        return []
    return got


def _block(tag: str, body: str) -> str:
    return f"<{tag}>\n{body}\n</{tag}>"


def _overhead(tag: str) -> int:
    return len(_block(tag, "")) + 1  # +1: the newline joining blocks


def _fit_lines(lines: list[str], limit: int) -> list[str]:
    out: list[str] = []
    used = 0
    for line in lines:
        cost = len(line) + (1 if out else 0)
        if used + cost > limit:
            break
        out.append(line)
        used += cost
    return out


def compose(persona_text: str, navigation: str, lines: list[str], budget: int) -> tuple[str, bool]:
    """Blocks in the order persona, navigation, memories, within ``budget`` code points.

    Memories get first claim on the budget beyond a reserved share for the
    persona and navigation, then the persona takes what is left, then the
    navigation. Memory and navigation lines are kept whole.
    """
    persona_text = escape_injection(persona_text)
    nav_lines = [escape_injection(x) for x in navigation.splitlines() if x]
    lines = [escape_injection(x) for x in lines]
    nav_len = len("\n".join(nav_lines))

    def reserve_persona() -> int:
        return (
            _overhead(PERSONA_TAG) + min(len(persona_text), int(budget * PERSONA_SHARE))
            if persona_text
            else 0
        )

    def reserve_nav() -> int:
        return (
            _overhead(NAVIGATION_TAG) + min(nav_len, int(budget * NAVIGATION_SHARE))
            if nav_lines
            else 0
        )

    truncated = False
    mem_block = ""
    if lines:
        room = budget - reserve_persona() - reserve_nav() - _overhead(MEMORIES_TAG)
        kept = _fit_lines(lines, room)
        truncated |= len(kept) < len(lines)
        if kept:
            mem_block = _block(MEMORIES_TAG, "\n".join(kept))
    used = len(mem_block) + (1 if mem_block else 0)
    persona_block = ""
    if persona_text:
        room = budget - used - reserve_nav() - _overhead(PERSONA_TAG)
        if room >= min(MIN_PERSONA_CHARS, len(persona_text)):
            cut = truncate_chars(persona_text, room)
            truncated |= cut != persona_text
            persona_block = _block(PERSONA_TAG, cut)
        else:
            truncated = True
    used += len(persona_block) + (1 if persona_block else 0)
    nav_block = ""
    if nav_lines:
        kept = _fit_lines(nav_lines, budget - used - _overhead(NAVIGATION_TAG))
        truncated |= len(kept) < len(nav_lines)
        if kept:
            nav_block = _block(NAVIGATION_TAG, "\n".join(kept))
    out = "\n".join(b for b in (persona_block, nav_block, mem_block) if b)
    return out, truncated


def recall(
    store: Store,
    query: str,
    *,
    user_id: str,
    session_id: str | None = None,
    budget_chars: int | None = None,
    timeout_s: float | None = None,
) -> Recall:
    """What to inject before the user's next turn. ``session_id`` is accepted
    for hosts that pass it; memories are per user, so it does not filter."""
    s = store.settings
    budget = s.recall_budget_chars if budget_chars is None else max(int(budget_chars), 0)
    timeout = s.recall_timeout_s if timeout_s is None else float(timeout_s)
    with store.db.read() as conn:
        gen = active_generation(conn, user_id)
        row = persona(conn, user_id, gen)
        nav = navigation_text(scenes(conn, user_id, gen))
        # Global instructions (priority -1) say how the user wants the agent
        # to work at all times: they are recalled whatever the query.
        standing = [
            {**m, "score": 1.0, "standing": True}
            for m in standing_instructions(conn, user_id, gen, MAX_STANDING_INSTRUCTIONS)
        ]
    persona_text = str(row["persona"]) if row else ""
    found = (
        _search_with_deadline(store, query, user_id, s.recall_limit, timeout)
        if query.strip()
        else []
    )
    timed_out = found is None
    matched = [m for m in (found or []) if float(m["score"]) >= s.recall_threshold]
    seen = {m["memory_id"] for m in standing}
    hits = [*standing, *(m for m in matched if m["memory_id"] not in seen)]
    text_out, truncated = compose(persona_text, nav, [memory_line(m) for m in hits], budget)
    return Recall(text_out, persona_text, nav, hits, truncated, timed_out)
