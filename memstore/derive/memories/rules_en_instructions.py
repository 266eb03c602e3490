"""English standing instructions: how the user wants the assistant to answer from now on.

"Always answer me in Chinese", "no emojis please", "when you show code, use
Python" become instructions (global, priority -1, unless tied to a condition);
an order about the reply at hand ("make it shorter", "answer the question") is
not remembered.
"""

from __future__ import annotations

import re

from memstore.derive.memories.rules_text import memory, third_person
from memstore.derive.prompts import ExtractedMemory
from memstore.derive.queries import L0Message

_I = re.IGNORECASE

# --- standing instructions -------------------------------------------------------

_LANGUAGES = (
    "chinese|english|spanish|french|german|japanese|korean|italian|portuguese|russian|arabic|hindi"
)
_STYLE = re.compile(
    r"\b(?:answers?|repl(?:y|ies)|respond|responses?|speak|talk|tone|emojis?|bullet"
    r"|markdown|format(?:ting)?|formal|informal|casual|polite|concise|brief|short|shorter"
    r"|long(?:er)?|detailed|details?|jargon|technical|simpl[ey]|units|metric|imperial|celsius"
    r"|fahrenheit|spelling|cite|sources|apologi[sz]\w*|call me|address me|code|examples?"
    rf"|explanations?|explain|{_LANGUAGES}|language|steps?|lists?|tables?)\b",
    _I,
)
_IMPERATIVE = re.compile(
    r"^(?:always|never|don't|do not|dont|stop|keep|use|avoid|answer|reply|respond|speak"
    r"|talk|write|give|call|be|make|include|add|cite|explain|show|format|address|refer|try"
    r"|start|put|list|switch|no need to|i want you to|i'd like you to|i would like you to"
    r"|i'd rather you|i would rather you|i prefer)\b",
    _I,
)
_LEAD = re.compile(
    r"^(?:please|kindly|and|also|from now on|going forward|in (?:the )?future|henceforth)"
    r"[\s,]+",
    _I,
)
_TRAIL = re.compile(r"[\s,]*(?:please|from now on|going forward|thanks|thank you)$", _I)
# A standing instruction says so ("always", "from now on", "your answers", "with me")
# or names a style that only makes sense as a standing one (emojis, units…); an
# order about the current reply ("make it shorter", "answer the question") is not.
_STANDING = re.compile(
    r"\b(?:always|never|don't|do not|dont|stop|from now on|going forward|in (?:the )?future"
    r"|your (?:answers|replies|responses|explanations)|with me|to me|me in|answer me"
    r"|reply to me|i want you|i'd like you|i would like you|i'd rather|i would rather|i prefer"
    r"|no need|things|everything)\b",
    _I,
)
_STRONG_STYLE = re.compile(
    r"\b(?:emojis?|bullet|markdown|units|metric|imperial|celsius|fahrenheit|spelling|jargon"
    r"|sources|formal|concise|tone|call me|address me|detailed explanations"
    rf"|in (?:{_LANGUAGES}))\b",
    _I,
)
_ONE_OFF = re.compile(
    r"\b(?:it|this|that|these|those|again|instead|version|the (?:question|reply|answer|email"
    r"|letter|text|above|following)|below|something else)\b",
    _I,
)
_CONDITION = re.compile(r"^(?:when|whenever)\b[^,]+,\s*(?P<rest>.+)$", _I)


# "Short answers please", "no emojis": a standing style without a verb.
_STYLE_NOUN = re.compile(
    r"^(?:no|short|shorter|brief|longer|detailed|simple|simpler|concise|more|less|fewer)"
    r" (?:\w+ )?(?:answers|replies|responses|emojis?|markdown|bullet points|jargon|explanations)"
    r"(?:,? please)?$",
    _I,
)


# "I don't like emojis": a dislike of the assistant's style is an instruction.
_STYLE_DISLIKE = re.compile(
    r"^I (?:really )?(?:don't like|do not like|hate|dislike|can't stand) (?:it when you use )?"
    r"(?P<v>(?:\w+ )?(?:emojis?|bullet points|markdown|jargon|long answers|exclamation marks))\b",
    _I,
)


def instruction(clause: str, msg: L0Message) -> ExtractedMemory | None:
    dislike = _STYLE_DISLIKE.match(clause)
    if dislike is not None:
        return memory(
            f"Instruction from the user: Don't use {dislike['v']}",
            "instruction",
            -1,
            "Working with the user",
            msg,
        )
    if _STYLE_NOUN.match(clause):
        body = _TRAIL.sub("", clause).strip(" .!")
        return memory(
            f"Instruction from the user: {body}", "instruction", -1, "Working with the user", msg
        )
    text, priority = clause, -1
    for _ in range(3):
        text = _LEAD.sub("", text)
    cond = _CONDITION.match(text)
    if cond is not None:  # "when you show code, use Python": for that case only
        text, priority = _LEAD.sub("", cond["rest"]), 70
    text = _TRAIL.sub("", text).strip(" .!")
    if not text or not _IMPERATIVE.match(text) or not _STYLE.search(clause):
        return None
    standing = cond is not None or _STANDING.search(clause) or _STRONG_STYLE.search(text)
    explicit = re.search(
        r"(?i)\b(?:from now on|always|never|going forward|in (?:the )?future)\b", clause
    )
    if (_ONE_OFF.search(text) and not explicit) or not standing:
        return None
    if re.match(r"(?i)call me [A-Z][\w.]*(?: [A-Z][\w.]*)?$", text):
        return None  # "call me Sam" names the user
    if re.match(r"(?i)i prefer\b", text) and not re.search(r"(?i)\b(?:answers?|repl|respon)", text):
        return None  # "I prefer tea" is a taste, not an instruction
    body = clause if priority != -1 else text
    body = _LEAD.sub("", _TRAIL.sub("", body).strip(" .!"))
    body = third_person(body)
    return memory(
        f"Instruction from the user: {body[0].upper()}{body[1:]}",
        "instruction",
        priority,
        "Working with the user",
        msg,
    )


# "Can you always answer in Chinese?" asks for a standing rule, politely.
POLITE = re.compile(
    r"^(?:can|could|would|will) you (?:please )?(?=always|never|from now on|stop|only|please)",
    _I,
)


def asks_standing(question: str) -> bool:
    """A question that is really a standing instruction, kept by the clause splitter."""
    return bool(POLITE.match(question)) and bool(_STYLE.search(question))
