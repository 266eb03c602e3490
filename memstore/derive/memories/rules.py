"""The offline rule-based deriver for L1: plain first-person statements.

It turns what the user says about themselves in English and Chinese — diet,
allergies, health, pets, family, home, work, tastes, routines ("I'm
vegetarian", "I don't eat pork", 我乳糖不耐受), standing instructions
("always answer me in Chinese", 请用中文回答: global, priority -1) and dated
events ("yesterday I…", 明天我…) — into memories written in the third person
(rules_en.py, rules_en_instructions.py, rules_zh.py). Questions, requests for a
task, hedges, moods, reactions, quoted text, other people and the assistant's
own words are rejected first: a wrong memory is worse than a missing one, and
re-deriving with an LLM later replaces all of it. Precision and recall are
measured on a labelled corpus (``memstore bench rules``, tests/data/).

This module splits messages into clauses, drops quoted text, and decides
dedup without a model: near-identical text is skipped, the same *slot* (name,
home, work, the attitude to one thing) with a different value supersedes the
old memory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from memstore.derive.memories import rules_en, rules_zh
from memstore.derive.memories.rules_en_instructions import asks_standing
from memstore.derive.memories.rules_text import memory, third_person
from memstore.derive.prompts import DedupDecision, ExtractedMemory
from memstore.derive.queries import L0Message
from memstore.text import cjk_bigrams, has_cjk

__all__ = ["RULES_VERSION", "clauses", "decide", "extract", "similarity", "slot_of", "third_person"]

RULES_VERSION = "rules/2"
SKIP_SIMILARITY = 0.85

# --- similarity ------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")
_STOP = frozenset(
    [
        "the",
        "a",
        "an",
        "user",
        "user's",
        "is",
        "are",
        "to",
        "of",
        "and",
        "in",
        "on",
        "at",
        "for",
        "with",
        "s",
    ]
)


def tokens(text: str) -> set[str]:
    words = {w for w in _WORD.findall(text.casefold()) if not has_cjk(w) and w not in _STOP}
    return words | set(cjk_bigrams(text).split())


def similarity(a: str, b: str) -> float:
    """Jaccard overlap of words and CJK bigrams, in [0, 1]."""
    ta, tb = tokens(a), tokens(b)
    if not ta or not tb:
        return 1.0 if normalize(a) == normalize(b) else 0.0
    return len(ta & tb) / len(ta | tb)


def normalize(text: str) -> str:
    return " ".join(_WORD.findall(text.casefold()))


# --- extraction --------------------------------------------------------------

# Quoted text is someone's words, not the user's ("translate 'I am a teacher'").
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”|「[^」]*」|『[^』]*』|(?<!\w)'[^']*'(?!\w)")
# A speaker label ("Ana: I adopted a puppy"), as transcripts and the LoCoMo
# capture write it; an order with a colon ("Translate: I am…") is not one.
_SPEAKER = re.compile(
    r"^(?!(?i:translate|correct|fix|check|rewrite|summari[sz]e|paraphrase|proofread|edit|example"
    r"|input|text|sentence|prompt|question|q|grammar)\b)[A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,2}:\s+"
    r"|^(?![^:：]*(?:翻译|句|帮|请|例))[\u4e00-\u9fff]{2,4}[:：]\s*"
)
_EN_REMEMBER = re.compile(r"^(?:please\s+)?remember(?: that)?\s+(?P<v>.+)", re.I)
_ZH_REMEMBER = re.compile(r"请(?:你)?记住[：:，,]?(?P<v>.+)")
_SPLIT = re.compile(
    r"(?<=[.!?。！？；;\n])\s*|[，]|\s+(?:and|but|so)\s+(?=I\b)|(?<=[a-z]),\s+(?=I\b)"
    # "I'm vegetarian, what can I cook?": the statement before the question stands.
    r"|,\s+(?=(?:what|how|where|which|who|why|can|could|would|do|does|is|are|any)\b[^,]*\?$)"
)
_ZH_SUBJECTLESS = re.compile(
    r"(?:也|还|很|非常|特别|最)?(?:不喜欢|讨厌|不爱|喜欢|热爱|爱|住在|搬到)"
)


def _split(text: str) -> list[str]:
    parts: list[str] = []
    start = 0
    for m in _SPLIT.finditer(text):
        # "My wife and I have…" is one subject, not two clauses.
        if "and" in m.group() and re.search(r"(?i)\b(?:my|our) \w+$", text[start : m.start()]):
            continue
        parts.append(text[start : m.start()])
        start = m.end()
    parts.append(text[start:])
    return parts


def clauses(text: str) -> list[str]:
    """Statements of a message; questions and conditionals are dropped."""
    out: list[str] = []
    for part in _split(text):
        part = part.strip()
        question = part.endswith(("?", "？")) and not asks_standing(part)
        if not part or question or re.match(r"(?i)(if|如果|假如)\b", part):
            continue
        # Chinese drops a repeated subject: "我喜欢茶，不喜欢咖啡" — the second
        # clause is still about 我.
        if out and out[-1].startswith("我") and _ZH_SUBJECTLESS.match(part):
            part = "我" + part
        out.append(part.rstrip(".!。！；;"))
    return out


def _same_subject(content: str) -> bool:
    return slot_of(content) in ("home", "work", "name")


def _classify(clause: str, msg: L0Message) -> list[ExtractedMemory]:
    cjk = has_cjk(clause)
    remember = (_ZH_REMEMBER if cjk else _EN_REMEMBER).search(clause)
    if remember is None:
        if cjk:
            return rules_zh.classify(clause, msg, _same_subject)
        return rules_en.classify(clause, msg, _same_subject)
    inner = remember.group("v").strip()
    if not cjk and inner.lower().startswith("to "):  # "remember to always cite sources"
        return rules_en.classify(inner[3:], msg, _same_subject)
    if not cjk and not re.search(r"(?i)\b(?:I|my|me|we|our)\b", inner):
        return []  # "remember when we…": a question about the chat, not a note
    got = (rules_zh.fact if cjk else rules_en.fact)(inner, msg)
    if got:
        return got
    prefix = "用户希望记住：" if cjk else "The user asked to remember: "
    return [memory(prefix + third_person(inner), "persona", 70, "备忘" if cjk else "Notes", msg)]


def extract(messages: Sequence[L0Message], max_memories: int) -> list[ExtractedMemory]:
    """Rule-based candidates from the user's own messages, in message order."""
    out: list[ExtractedMemory] = []
    seen: dict[str, int] = {}  # normalised content -> index in out
    for msg in messages:
        if msg.role != "user":
            continue
        text = _SPEAKER.sub("", msg.text.replace("’", "'").replace("‘", "'"), count=1)
        for clause in clauses(_QUOTED.sub(" ", text)):
            for mem in _classify(clause, msg):
                key = normalize(mem.content)
                if not key:
                    continue
                if key in seen:  # said again: one candidate, every message as its source
                    first = out[seen[key]]
                    ids = first.source_message_ids + tuple(
                        i for i in mem.source_message_ids if i not in first.source_message_ids
                    )
                    out[seen[key]] = replace(first, source_message_ids=ids)
                else:
                    seen[key] = len(out)
                    out.append(mem)
    return out[: max(max_memories, 0)]


# --- dedup --------------------------------------------------------------------

_SLOTS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^The user's name is (?P<v>.+)\.$"), "name"),
    (re.compile(r"^The user lives in (?P<v>.+)\.$"), "home"),
    (re.compile(r"^The user works (?:as|at|for) (?P<v>.+)\.$"), "work"),
    (re.compile(r"^The user is (?P<v>\d+) years old\.$"), "age"),
    (re.compile(r"^The user (?:likes|dislikes|prefers) (?P<v>.+)\.$"), "pref:"),
    (re.compile(r"^用户的名字是(?P<v>.+)。$"), "name"),
    (re.compile(r"^用户住在(?P<v>.+)。$"), "home"),
    (re.compile(r"^用户在(?P<v>.+)工作。$"), "work"),
    (re.compile(r"^用户(?:不)?喜欢(?P<v>.+)。$"), "pref:"),
]


def slot_of(content: str) -> str | None:
    """The subject a canonical rules memory is about, or None."""
    for pattern, slot in _SLOTS:
        m = pattern.match(content)
        if m:
            return slot + normalize(m.group("v")) if slot.endswith(":") else slot
    return None


def decide(candidate: ExtractedMemory, existing: Sequence[tuple[str, str]]) -> DedupDecision:
    """Deterministic dedup of ``candidate`` against ``(memory_id, content)`` pairs."""

    def decision(action: str, targets: tuple[str, ...], reason: str) -> DedupDecision:
        return DedupDecision(
            action=action,  # type: ignore[arg-type]  # one of DEDUP_ACTIONS
            target_ids=targets,
            content="" if action == "skip" else candidate.content,
            type=candidate.type,
            priority=candidate.priority,
            scene_name=candidate.scene_name,
            reason=reason,
        )

    best = max(existing, key=lambda e: similarity(candidate.content, e[1]), default=None)
    if best is not None and (
        normalize(best[1]) == normalize(candidate.content)
        or similarity(candidate.content, best[1]) >= SKIP_SIMILARITY
    ):
        return decision("skip", (best[0],), "near-identical to an existing memory")
    slot = slot_of(candidate.content)
    if slot is not None:
        same = tuple(mid for mid, text in existing if slot_of(text) == slot)
        if same:
            return decision("supersede", same, f"same subject ({slot}) with a new value")
    return decision("store", (), "new information")
