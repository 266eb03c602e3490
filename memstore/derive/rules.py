"""The offline rule-based deriver for L1: explicit first-person statements only.

It is deliberately modest: it turns clear statements ("my name is…", "I love…",
"always answer in…", "yesterday I…", 我叫…/我喜欢…/请记住…/昨天我…) into
memories written in a canonical third-person form, and it recognises that
canonical form again to decide dedup without a model: near-identical text is
skipped, the same *slot* (name, home, work, the attitude to one thing) with a
different value supersedes the old memory. Everything else is left alone —
a wrong memory is worse than a missing one, and re-deriving with an LLM later
replaces all of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from memstore.derive.state import L0Message
from memstore.llm.prompts import DedupDecision, ExtractedMemory, MemoryType
from memstore.text import cjk_bigrams, has_cjk
from memstore.timeutil import parse_when

RULES_VERSION = "rules/1"
MAX_VALUE_CHARS = 160
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


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    build: Callable[[re.Match[str], L0Message], ExtractedMemory | None]


# Trailing words that qualify the statement, not the thing ("I hate coffee now"):
# kept, they would make "coffee now" a different subject from "coffee".
_TAIL = re.compile(
    r"(?:\s+(?:now|anymore|any more|too|as well|a lot|very much|so much|these days))+$", re.I
)


def _value(m: re.Match[str]) -> str:
    v = (m.groupdict().get("v") or m.groupdict().get("v2") or "").strip(" \t\"'“”‘’.,!;:，。！；：")
    return _TAIL.sub("", v[:MAX_VALUE_CHARS]).strip()


_PRONOUNS = [
    (re.compile(r"\bI'm\b|\bI am\b", re.I), "the user is"),
    (re.compile(r"\bI've\b", re.I), "the user has"),
    (re.compile(r"\bI'll\b", re.I), "the user will"),
    (re.compile(r"\bI'd\b", re.I), "the user would"),
    (re.compile(r"\bI\b"), "the user"),
    (re.compile(r"\bmy\b", re.I), "the user's"),
    (re.compile(r"\bmine\b", re.I), "the user's"),
    (re.compile(r"\bmyself\b", re.I), "themselves"),
    (re.compile(r"\bme\b", re.I), "the user"),
]


def third_person(text: str) -> str:
    if has_cjk(text):
        return text.replace("我们", "用户和家人").replace("我", "用户")
    for pattern, repl in _PRONOUNS:
        text = pattern.sub(repl, text)
    return text


def _sentence(text: str, cjk: bool) -> str:
    text = text.strip()
    if not text:
        return text
    if cjk:
        return text if text.endswith("。") else text + "。"
    text = text[0].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def _mem(
    content: str,
    type_: MemoryType,
    priority: int,
    scene: str,
    msg: L0Message,
    start: str | None = None,
) -> ExtractedMemory:
    cjk = has_cjk(content)
    return ExtractedMemory(
        content=_sentence(content, cjk),
        type=type_,
        priority=priority,
        scene_name=scene,
        source_message_ids=(msg.message_id,),
        activity_start=start,
        activity_end=start,
    )


def _fact(
    template: str, type_: MemoryType, priority: int, scene: str
) -> Callable[[re.Match[str], L0Message], ExtractedMemory | None]:
    def build(m: re.Match[str], msg: L0Message) -> ExtractedMemory | None:
        v = _value(m)
        if not v:
            return None
        groups = {k: (g or "") for k, g in m.groupdict().items() if k != "v2"}
        groups["v"] = third_person(v)
        return _mem(template.format(**groups), type_, priority, scene, msg)

    return build


_I = re.IGNORECASE
_ADV = r"(?:really |absolutely |also |truly |just )?"
# Checked in order; the first persona rule that matches a clause wins.
_EN_RULES: list[_Rule] = [
    _Rule(
        re.compile(r"\b(?:my name is|call me)\s+(?P<v>.+)", _I),
        _fact("The user's name is {v}", "persona", 90, "Identity"),
    ),
    _Rule(
        re.compile(r"\bI(?:'m| am) allergic to\s+(?P<v>.+)", _I),
        _fact("The user is allergic to {v}", "persona", 95, "Health"),
    ),
    _Rule(
        re.compile(r"\bI(?:'m| am) (?P<v>\d{1,3}) years? old", _I),
        _fact("The user is {v} years old", "persona", 80, "Identity"),
    ),
    _Rule(
        re.compile(
            rf"\bI {_ADV}(?:hate|dislike|can't stand|cannot stand|don't like|do not like"
            rf"|don't enjoy)\s+(?P<v>.+)",
            _I,
        ),
        _fact("The user dislikes {v}", "persona", 65, "Preferences"),
    ),
    _Rule(
        re.compile(rf"\bI {_ADV}(?P<verb>prefer)\s+(?P<v>.+)", _I),
        _fact("The user prefers {v}", "persona", 65, "Preferences"),
    ),
    _Rule(
        re.compile(rf"\bI {_ADV}(?:love|like|enjoy|adore)\s+(?P<v>.+)", _I),
        _fact("The user likes {v}", "persona", 65, "Preferences"),
    ),
    _Rule(
        re.compile(r"\bI(?: now| currently)? (?:live|am living|'m living) in\s+(?P<v>.+)", _I),
        _fact("The user lives in {v}", "persona", 80, "Home"),
    ),
    _Rule(
        re.compile(r"\bI(?:'ve| have| just)? moved to\s+(?P<v>.+)", _I),
        _fact("The user lives in {v}", "persona", 80, "Home"),
    ),
    _Rule(
        re.compile(r"\bI(?: now| currently)? work (?P<prep>as|at|for)\s+(?P<v>.+)", _I),
        _fact("The user works {prep} {v}", "persona", 80, "Work"),
    ),
    _Rule(
        re.compile(r"\bI(?:'m| am) (?P<art>an?)\s+(?P<v>.+)", _I),
        _fact("The user is {art} {v}", "persona", 75, "Identity"),
    ),
]
_ZH_RULES: list[_Rule] = [
    _Rule(
        re.compile(r"我(?:的名字)?叫(?P<v>.+)|我的名字是(?P<v2>.+)"),
        _fact("用户的名字是{v}", "persona", 90, "个人信息"),
    ),
    _Rule(re.compile(r"我对(?P<v>.+?)过敏"), _fact("用户对{v}过敏", "persona", 95, "健康")),
    _Rule(
        re.compile(r"我(?:很|非常|特别|最|也|真的)?(?:不喜欢|讨厌|不爱|受不了)(?P<v>.+)"),
        _fact("用户不喜欢{v}", "persona", 65, "喜好"),
    ),
    _Rule(
        re.compile(r"我(?:很|非常|特别|最|也|真的)?(?:喜欢|热爱|爱|偏爱)(?P<v>.+)"),
        _fact("用户喜欢{v}", "persona", 65, "喜好"),
    ),
    _Rule(
        re.compile(r"我(?:现在)?住在(?P<v>.+)|我搬到了?(?P<v2>.+)"),
        _fact("用户住在{v}", "persona", 80, "居住"),
    ),
    _Rule(
        re.compile(r"我(?:现在)?在(?P<v>.+?)(?:工作|上班)"),
        _fact("用户在{v}工作", "persona", 80, "工作"),
    ),
    _Rule(
        re.compile(r"我是(?:一名|一个|一位)?(?P<v>.+)"),
        _fact("用户是{v}", "persona", 75, "个人信息"),
    ),
]

_EN_INSTRUCTION = re.compile(
    r"^(?:please\s+|and\s+)?(?:(?P<kw>always|never)\s+(?P<v>.+)|from now on,?\s+(?P<v2>.+))", _I
)
_ZH_INSTRUCTION = re.compile(
    r"^(?:以后|今后|从现在开始|从今以后)?[，,]?(?:请你?)?(?P<v>(?:总是|一直|永远|始终|每次都|不要|别|永远不要|务必).+)"
)
_EN_REMEMBER = re.compile(r"\b(?:please\s+)?remember(?: that)?\s+(?P<v>.+)", _I)
_ZH_REMEMBER = re.compile(r"请(?:你)?记住[：:，,]?(?P<v>.+)")

_EN_WHEN = re.compile(
    r"\b(?P<when>yesterday|today|this morning|last night|last week|last month|last year"
    r"|(?P<n>\d{1,2}) days ago|on (?P<date>\d{4}-\d{2}-\d{2}))\b,?",
    _I,
)
_ZH_WHEN = re.compile(r"(?P<when>昨天|前天|今天|今天早上|昨晚|上周|上个月|去年)")
_OFFSETS = {
    "yesterday": 1, "last night": 1, "today": 0, "this morning": 0, "last week": 7,
    "last month": 30, "last year": 365, "昨天": 1, "昨晚": 1, "前天": 2, "今天": 0,
    "今天早上": 0, "上周": 7, "上个月": 30, "去年": 365,
}  # fmt: skip


def _groups_v(m: re.Match[str]) -> str:
    d = m.groupdict()
    return (d.get("v") or d.get("v2") or "").strip()


def _persona_rules(clause: str, msg: L0Message) -> list[ExtractedMemory]:
    for rule in _ZH_RULES if has_cjk(clause) else _EN_RULES:
        m = rule.pattern.search(clause)
        if m is None:
            continue
        got = rule.build(m, msg)
        return [got] if got is not None else []
    return []


def _dated(clause: str, msg: L0Message) -> ExtractedMemory | None:
    cjk = has_cjk(clause)
    m = (_ZH_WHEN if cjk else _EN_WHEN).search(clause)
    if m is None or not re.search(r"我" if cjk else r"\bI\b", clause):
        return None
    when = m.group("when").lower()
    day = parse_when(msg.occurred_at).date()
    date_text = m.groupdict().get("date")
    if date_text:
        day = parse_when(date_text).date()
    elif m.groupdict().get("n"):
        day -= timedelta(days=int(m.group("n")))
    else:
        day -= timedelta(days=_OFFSETS.get(when, 0))
    rest = (clause[: m.start()] + clause[m.end() :]).strip(" ,，")
    rest = re.sub(r"\s{2,}", " ", rest)
    if not rest:
        return None
    iso = day.isoformat()
    around = (
        "On"
        if when in ("yesterday", "today", "this morning", "last night") or date_text
        else "Around"
    )
    content = f"{iso}，{third_person(rest)}" if cjk else f"{around} {iso}, {third_person(rest)}"
    return _mem(content, "episodic", 60, "经历" if cjk else "Events", msg, iso)


def _instruction(clause: str, msg: L0Message) -> ExtractedMemory | None:
    if has_cjk(clause):
        if clause.startswith("我"):
            return None
        m = _ZH_INSTRUCTION.match(clause)
        if m is None:
            return None
        v = m.group("v").strip(" 。！")
        return _mem(f"用户要求助手：{third_person(v)}", "instruction", -1, "沟通偏好", msg)
    m = _EN_INSTRUCTION.match(clause)
    if m is None:
        return None
    v = _groups_v(m).rstrip(" .!")
    if not v:
        return None
    kw = (m.group("kw") or "").capitalize()
    text = f"{kw} {v}" if kw else f"From now on, {v}"
    return _mem(
        f"Instruction from the user: {third_person(text)}",
        "instruction",
        -1,
        "Working with the user",
        msg,
    )


_SPLIT = re.compile(
    r"(?<=[.!?。！？；;\n])\s*|[，]|\s+(?:and|but|so)\s+(?=I\b)|(?<=[a-z]),\s+(?=I\b)"
)


_ZH_SUBJECTLESS = re.compile(
    r"(?:也|还|很|非常|特别|最)?(?:不喜欢|讨厌|不爱|喜欢|热爱|爱|住在|搬到)"
)


def clauses(text: str) -> list[str]:
    """Statements of a message; questions and conditionals are dropped."""
    out: list[str] = []
    for part in _SPLIT.split(text):
        part = (part or "").strip()
        if not part or part.endswith(("?", "？")) or re.match(r"(?i)(if|如果|假如)\b", part):
            continue
        # Chinese drops a repeated subject: "我喜欢茶，不喜欢咖啡" — the second
        # clause is still about 我.
        if out and out[-1].startswith("我") and _ZH_SUBJECTLESS.match(part):
            part = "我" + part
        out.append(part.rstrip(".!。！；;"))
    return out


def extract(messages: Sequence[L0Message], max_memories: int) -> list[ExtractedMemory]:
    """Rule-based candidates from the user's own messages, in message order."""
    out: list[ExtractedMemory] = []
    seen: dict[str, int] = {}  # normalised content -> index in out
    for msg in messages:
        if msg.role != "user":
            continue
        for clause in clauses(msg.text):
            got: list[ExtractedMemory] = []
            remember = (_ZH_REMEMBER if has_cjk(clause) else _EN_REMEMBER).search(clause)
            if remember is not None:
                inner = remember.group("v").strip()
                got = _persona_rules(inner, msg)
                if not got:
                    cjk = has_cjk(inner)
                    prefix = "用户希望记住：" if cjk else "The user asked to remember: "
                    got = [
                        _mem(
                            prefix + third_person(inner),
                            "persona",
                            70,
                            "备忘" if cjk else "Notes",
                            msg,
                        )
                    ]
            else:
                instruction = _instruction(clause, msg)
                if instruction is not None:
                    got = [instruction]
                else:
                    dated = _dated(clause, msg)
                    # "I moved to Munich last week" is an event and a fact; the
                    # fact must not keep the time words.
                    plain = (_ZH_WHEN if has_cjk(clause) else _EN_WHEN).sub("", clause).strip()
                    got = ([dated] if dated else []) + _persona_rules(plain, msg)
            for mem in got:
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
