"""What recall reads from the question itself, before any candidate counts.

- The query-level gate (``off_topic``): small talk, or a question naming
  people, places or titles that none of the candidates found for it holds.
- Dates (``query_dates``): a month or year the question names, so items
  dated then can be lifted.
- Personal questions (``personal``): the question is about the user or
  someone they mentioned ("what should I cook for her?"), not a task or a
  fact of the world; on a small store such a question is answered from
  what the store holds even when no item is close enough for the gate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from memstore.recall.text import WORD_RE, term_matches
from memstore.text.fts import STOP_WORDS
from memstore.text.info import is_small_talk


class Candidate(Protocol):
    """What the query-level gate reads of a candidate (``recall.rank.Candidate``;
    a protocol here, so this module does not import the ranking back)."""

    @property
    def kind(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def row(self) -> dict[str, Any]: ...
    @property
    def sources(self) -> Sequence[Candidate]: ...


_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH_RE = re.compile(
    r"\b(" + "|".join(m.capitalize() for m in _MONTHS) + r")\b(?:\s+\d{1,2}(?:st|nd|rd|th)?\b)?"
    r"(?:,?\s+((?:19|20)\d\d))?"
)
_YEAR_RE = re.compile(r"\b(?:in|during|of)\s+((?:19|20)\d\d)\b")


def query_dates(query: str) -> list[str]:
    """Date prefixes a question names: "in July 2023" → "2023-07", "in June"
    → "-06" (any year), "in 2022" → "2022"."""
    out = [
        f"{m.group(2)}-{_MONTHS.index(m.group(1).lower()) + 1:02d}"
        if m.group(2)
        else f"-{_MONTHS.index(m.group(1).lower()) + 1:02d}"
        for m in _MONTH_RE.finditer(query)
    ]
    # "May I ..." is not a month: only a month after a word counts.
    out = [d for d, m in zip(out, _MONTH_RE.finditer(query), strict=True) if m.start() > 0]
    return out + [m.group(1) for m in _YEAR_RE.finditer(query)]


def dated(row: dict[str, Any], dates: list[str]) -> bool:
    """The row (a message, or a memory with an activity date) falls in one of
    ``dates`` (``query_dates``)."""
    when = str(row.get("occurred_at") or row.get("activity_start") or "")
    return any(when[4:7] == d if d.startswith("-") else when.startswith(d) for d in dates)


# A capitalised word inside a question: a name, a place, a title.
_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][\w'’-]{2,})")
_POSSESSIVE = re.compile(r"['’]s$")


# "I'd", "I'm", "I've", "I'll": capitalised, but the user, not a name.
_I_CONTRACTION = re.compile(r"^i['’][a-z]+$")


def query_names(query: str) -> list[str]:
    """The capitalised words of ``query`` past its first word (case-folded,
    possessive dropped), stop words and contractions of "I" left out."""
    out = []
    for m in _CAPITALISED.finditer(query.strip()):
        w = _POSSESSIVE.sub("", m.group(1)).casefold()
        if w not in STOP_WORDS and not _I_CONTRACTION.match(w):
            out.append(w)
    return out


def _candidate_words(cands: Sequence[Candidate]) -> set[str]:
    seen: set[str] = set()
    for c in cands:
        for x in (c, *c.sources):
            seen.update(w.casefold() for w in WORD_RE.findall(x.text))
            if x.kind == "message" and x.row.get("speaker"):
                seen.update(w.casefold() for w in WORD_RE.findall(str(x.row["speaker"])))
    return seen


def _known(names: list[str], seen: set[str]) -> bool:
    # A shared start counts ("Japan" / "Japanese"), as in word coverage.
    return any(n in seen or any(term_matches(n, w) for w in seen) for n in names)


def names_unknown(query: str, cands: Sequence[Candidate]) -> bool:
    """True when the query names someone or something (capitalised words)
    and none of those names occurs in any candidate, nor in the speakers of
    the messages: the question is about what this user's memory does not
    hold ("What did Marguerite say about her trip?", "What is the capital of
    Australia?"), and whatever came back is only alike in topic."""
    names = query_names(query)
    if not names:
        return False
    return not _known(names, _candidate_words(cands))


def about_someone(query: str, cands: Sequence[Candidate]) -> bool:
    """True when the question is about a person: the user or someone they
    spoke of (``personal``), or a name (capitalised word) that occurs in a
    candidate or among the speakers. "What did Caroline paint?" and "what
    tea do I like?" are; "Why is the sky blue?", "Explain how a hash map
    works." are not."""
    if personal(query):
        return True
    names = query_names(query)
    return bool(names) and _known(names, _candidate_words(cands))


def off_topic(query: str, cands: Sequence[Candidate]) -> bool:
    """The query-level gate: small talk, or names this memory does not know."""
    return is_small_talk(query) or names_unknown(query, cands)


# The user or someone already spoken of: first-person words, and the
# third-person pronouns that point back to a person ("where does she live?").
_PERSONAL_RE = re.compile(
    r"\b(?:i|i['’](?:m|d|ve|ll)|me|my|mine|myself|we|us|our|ours|"
    r"she|her|hers|he|him|his|they|them|their)\b|[我她他]",
    re.IGNORECASE,
)
# "How do I reverse a linked list?", "Give me three tips for better
# sleep.", "Can you explain recursion to me?": a task for the assistant, in
# the first person only by the idiom (the user is its recipient, not its
# topic).
_TASK_RE = re.compile(
    r"^\s*(?:how|what(?:['’]s| is) the best way)\s+(?:do|can|could|should|would)\s+"
    r"(?:i|we|you|one)\b|^\s*how\s+to\b|"
    r"^\s*(?:(?:can|could|would|will)\s+you\s+|please\s+)?"
    r"(?:give|tell|show|help|explain|teach|send|write|find|get|make)\b"
    r"(?:\s+me\b|[^.?!]*\bto\s+me\b)",
    re.IGNORECASE,
)


def personal(query: str) -> bool:
    """True when the question is about the user or a person they spoke of:
    it says "I", "my", "we", or "she"/"he"/"they" (我, 她, 他), outside a
    how-to or a request idiom ("how do I centre a div?", "give me…")."""
    if _TASK_RE.search(query):
        # The idiom's own "me"/"I" does not count; the rest of it may ("help
        # me plan my sister's visit").
        query = _TASK_RE.sub("", query)
    return bool(_PERSONAL_RE.search(query))
