"""Recall's text: clipping around the match, one line per item, blocks in a budget.

Every length here is in code points (Python ``str``), and a cut never lands
inside a surrogate pair or a grapheme cluster that a reader sees as one
character (a letter with combining marks, an emoji ZWJ sequence, a flag).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

from memstore.text import escape_injection, fold_diacritics, query_terms

ELLIPSIS = "…"
# Cluster glue: a cut before one of these would split a visible character.
_ZWJ = "\u200d"
_GLUE_RANGES = (
    ("\u200c", "\u200d"),  # ZWNJ, ZWJ
    ("\ufe00", "\ufe0f"),  # variation selectors
    ("\U0001f3fb", "\U0001f3ff"),  # skin-tone modifiers
    ("\U000e0020", "\U000e007f"),  # emoji tag sequences
    ("\udc00", "\udfff"),  # a low surrogate left by a lenient decoder
)
WORD_RE = re.compile(r"\w+")
_REGIONAL = ("\U0001f1e6", "\U0001f1ff")
# How far a cut may move to land on whitespace instead of inside a word.
WORD_SLACK = 24


def _glued(ch: str) -> bool:
    return unicodedata.combining(ch) > 0 or any(lo <= ch <= hi for lo, hi in _GLUE_RANGES)


def _regional(ch: str) -> bool:
    return _REGIONAL[0] <= ch <= _REGIONAL[1]


def safe_cut(s: str, i: int) -> int:
    """The nearest index ``<= i`` where ``s`` may be cut without splitting a
    visible character."""
    i = max(0, min(i, len(s)))
    while 0 < i < len(s) and (_glued(s[i]) or s[i - 1] == _ZWJ):
        i -= 1
    if 0 < i < len(s) and _regional(s[i]) and _regional(s[i - 1]):
        # Flags are pairs of regional indicators: count the run to find pairs.
        j = i
        while j > 0 and _regional(s[j - 1]):
            j -= 1
        if (i - j) % 2:
            i -= 1
    return i


def _word_start(s: str, i: int) -> int:
    """``i`` moved right to the start of a word, if one starts within the slack."""
    if i <= 0 or s[i - 1].isspace():
        return i
    for j in range(i, min(len(s), i + WORD_SLACK)):
        if s[j].isspace():
            return j + 1
    return i


def _word_end(s: str, i: int) -> int:
    """``i`` moved left to the end of a word, if one ends within the slack."""
    if i >= len(s) or s[i].isspace():
        return i
    for j in range(i, max(0, i - WORD_SLACK), -1):
        if s[j - 1].isspace():
            return j - 1
    return i


def term_matches(term: str, word: str) -> bool:
    """Same word, or the same stem by a shared prefix ("peanut" ~ "peanuts",
    "allergy" ~ "allergic", not "photos" ~ "photosynthesis"); short words
    must match exactly."""
    if term == word:
        return True
    if len(term) < 4 or len(word) < 4:
        return False
    n = 0
    for a, b in zip(term, word, strict=False):
        if a != b:
            break
        n += 1
    return n >= max(4, max(len(term), len(word)) - 3)


def match_positions(text: str, query: str) -> list[int]:
    """Start offsets in ``text`` of the words (and CJK bigrams) the query names."""
    latin, cjk = query_terms(query)
    # Without diacritics, as keyword search matched them ("creme", "crème").
    terms = [fold_diacritics(t).casefold() for t in latin]
    out = [
        m.start()
        for m in WORD_RE.finditer(text)
        if any(term_matches(t, fold_diacritics(m.group(0)).casefold()) for t in terms)
    ]
    for gram in cjk:
        g = gram.rstrip("*")
        start = text.find(g)
        while start >= 0:
            out.append(start)
            start = text.find(g, start + 1)
    return sorted(out)


def clip_around(text: str, query: str, cap: int) -> tuple[str, bool]:
    """``text`` in at most ``cap`` code points, centred on where the query
    matches most densely (the start when nothing matches); ``…`` marks a cut."""
    if len(text) <= cap:
        return text, False
    if cap <= 0:
        return "", True
    if cap == 1:
        return ELLIPSIS, True
    hits = match_positions(text, query)
    anchor = 0
    if hits:
        # The window (a third of it before the match) holding the most matches.
        def density(k: int) -> int:
            return sum(1 for h in hits[k:] if h - hits[k] < cap // 2)

        best = max(range(len(hits)), key=density)
        anchor = max(0, hits[best] - cap // 3)
    start = min(anchor, len(text) - cap + 1)
    start = safe_cut(text, _word_start(text, start)) if start > 0 else 0
    room = cap - (1 if start > 0 else 0)
    end = start + room
    if end < len(text):
        room -= 1  # the closing ellipsis
        end = start + room
        end = _word_end(text, end) if end - start > WORD_SLACK * 2 else end
        end = safe_cut(text, end)
        if end <= start:
            end = safe_cut(text, start + room)
    body = text[start:end].strip()
    out = (ELLIPSIS if start > 0 else "") + body + (ELLIPSIS if end < len(text) else "")
    return out, True


def block(tag: str, lines: Sequence[str]) -> str:
    return f"<{tag}>\n" + "\n".join(lines) + f"\n</{tag}>"


def block_overhead(tag: str) -> int:
    return len(block(tag, [""])) + 1  # +1: the newline that joins blocks


def join_blocks(blocks: Iterable[str]) -> str:
    return "\n".join(b for b in blocks if b)


def fit_lines(lines: Sequence[str], limit: int) -> list[str]:
    """Whole lines, in order, while they fit in ``limit`` (newlines counted)."""
    out: list[str] = []
    used = 0
    for line in lines:
        cost = len(line) + (1 if out else 0)
        if used + cost > limit:
            break
        out.append(line)
        used += cost
    return out


def safe(s: str) -> str:
    """Recalled text can never open or close an injected block."""
    return escape_injection(s)
