"""Shared pieces of the rule deriver: canonical sentences and third-person rewriting."""

from __future__ import annotations

import re
from collections.abc import Callable

from memstore.derive.prompts import ExtractedMemory, MemoryType
from memstore.derive.queries import L0Message
from memstore.text import has_cjk

MAX_VALUE_CHARS = 160

_PRONOUNS = [
    (re.compile(r"\bI'm\b|\bI am\b", re.I), "the user is"),
    (re.compile(r"\bI've\b", re.I), "the user has"),
    (re.compile(r"\bI'll\b", re.I), "the user will"),
    (re.compile(r"\bI'd\b", re.I), "the user would"),
    (re.compile(r"\bI\b"), "the user"),
    (re.compile(r"\bwe're\b|\bwe are\b", re.I), "the user and their family are"),
    (re.compile(r"\bwe've\b", re.I), "the user and their family have"),
    (re.compile(r"\bwe\b", re.I), "the user and their family"),
    (re.compile(r"\bmy\b|\bour\b", re.I), "the user's"),
    (re.compile(r"\bmine\b|\bours\b", re.I), "the user's"),
    (re.compile(r"\bmyself\b", re.I), "themselves"),
    (re.compile(r"\bme\b|\bus\b", re.I), "the user"),
]

# Verbs whose third person is not just "+s"; past forms and modals stay as they are.
_IRREGULAR = {
    "have": "has", "do": "does", "go": "goes", "don't": "doesn't", "am": "is",
    "haven't": "hasn't", "aren't": "isn't",
}  # fmt: skip
# Modals and past forms do not change with the subject.
_UNCHANGED = frozenset(
    [
        "can",
        "can't",
        "cannot",
        "could",
        "couldn't",
        "will",
        "won't",
        "would",
        "wouldn't",
        "should",
        "shouldn't",
        "must",
        "might",
        "may",
        "was",
        "wasn't",
        "did",
        "didn't",
        "had",
        "went",
        "got",
        "grew",
        "gave",
        "broke",
        "ran",
        "took",
        "made",
        "saw",
        "began",
        "bought",
        "came",
        "kept",
        "left",
        "lost",
        "met",
        "paid",
        "quit",
        "sold",
        "spent",
        "thought",
        "told",
        "wore",
        "won",
        "wrote",
        "felt",
        "found",
        "heard",
        "knew",
        "led",
        "meant",
        "put",
        "read",
        "said",
        "sent",
        "set",
        "sat",
        "slept",
        "spoke",
        "stood",
        "taught",
        "understood",
        "built",
        "caught",
        "chose",
        "drew",
        "drove",
        "fell",
        "fed",
        "fought",
        "flew",
        "forgot",
        "froze",
        "held",
        "hurt",
        "let",
        "rode",
        "rose",
        "sang",
        "shot",
        "shut",
        "swam",
        "threw",
        "woke",
        "became",
        "cut",
        "brought",
    ]
)
_ADVERBS = (
    "just|also|still|always|never|often|now|even|once|soon|already|sometimes"
    # "-ly" words are adverbs ("I actually started"), except the verbs among them.
    r"|(?!(?:apply|reply|supply|rely|fly|ally|bully|tally)\b)[a-z]{2,}ly"
)
# A bare "I" and the verb that must agree with its new subject ("I keep" -> "keeps").
_I_VERB = re.compile(rf"(?<!and )\bI((?: (?:{_ADVERBS}))*) ([a-z']+)")


def _third_singular(verb: str) -> str:
    if verb in _IRREGULAR:
        return _IRREGULAR[verb]
    if verb in _UNCHANGED or verb.endswith(("ed", "s")) or "'" in verb:
        return verb
    if verb.endswith(("sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(verb) > 2 and verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def third_person(text: str) -> str:
    """``I live in Oslo`` -> ``the user lives in Oslo``; Chinese 我 -> 用户."""
    if has_cjk(text):
        return text.replace("我们", "用户和家人").replace("我", "用户")
    for pattern, repl in _PRONOUNS[:4]:
        text = pattern.sub(repl, text)
    text = _I_VERB.sub(lambda m: f"the user{m[1]} {_third_singular(m[2])}", text)
    for pattern, repl in _PRONOUNS[4:]:
        text = pattern.sub(repl, text)
    return text


def sentence(text: str, cjk: bool) -> str:
    text = text.strip()
    if not text:
        return text
    if cjk:
        return text if text.endswith("。") else text + "。"
    text = text[0].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def clean_value(v: str) -> str:
    return v[:MAX_VALUE_CHARS].strip(" \t\"'“”‘’.,!;:，。！；：")


def memory(
    content: str,
    type_: MemoryType,
    priority: int,
    scene: str,
    msg: L0Message,
    start: str | None = None,
) -> ExtractedMemory:
    return ExtractedMemory(
        content=sentence(content, has_cjk(content)),
        type=type_,
        priority=priority,
        scene_name=scene,
        source_message_ids=(msg.message_id,),
        activity_start=start,
        activity_end=start,
    )


Builder = Callable[[re.Match[str], L0Message], ExtractedMemory | None]


def canon(
    template: str, scene: str, priority: int, trim: Callable[[str], str] = str.strip
) -> Builder:
    """A persona memory in a canonical form around the match's value ``v``, so that
    dedup can recognise its slot (``The user lives in {v}``)."""

    def build(m: re.Match[str], msg: L0Message) -> ExtractedMemory | None:
        v = trim(clean_value(m["v"] or ""))
        if not v:
            return None
        return memory(template.format(v=third_person(v)), "persona", priority, scene, msg)

    return build


def whole(scene: str, priority: int, cut: re.Pattern[str] | None = None) -> Builder:
    """A persona memory that is the whole clause in the third person (up to ``cut``)."""

    def build(m: re.Match[str], msg: L0Message) -> ExtractedMemory | None:
        text = cut.split(m.string, maxsplit=1)[0] if cut is not None else m.string
        return memory(third_person(clean_value(text)), "persona", priority, scene, msg)

    return build
