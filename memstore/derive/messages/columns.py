"""Everything the L0 projection derives from one message's text, in one pass.

Each message stored (captured, or replayed by a rebuild) needs the
low-information flag, the three full-text columns (text, CJK bigrams, word
roots) and the BM25 statistics of that full-text row (length in
tokens, repeated terms). Computed one function at a time the text is lowered,
tokenised and scanned five times, and on a rebuild that was most of the time
spent per message. :func:`message_columns` gives exactly what the
separate functions give (``tests/derive/test_l0_columns.py`` holds them as the
oracle), and for ASCII text — no CJK, no diacritics, no case folding beyond
``lower()`` — it derives everything from one lowered copy and one token list.
Other text takes the general path.
"""

from __future__ import annotations

import re
from collections import Counter

from memstore.text import document_columns, is_low_information, stem_text
from memstore.text.fts import STOP_WORDS
from memstore.text.info import FILLER_WORDS, LABEL_RE, MAX_WORDS
from memstore.text.stem import word_root
from memstore.text.terms import column_tokens, document_stats

__all__ = [
    "MessageColumns",
    "labelled_sql",
    "labelled_text",
    "message_columns",
    "message_tokens",
]


def labelled_text(speaker: str | None, text: str) -> str:
    """A message as search indexes it: ``"<speaker>: <text>"`` when the
    message names its speaker and the text does not start with that name
    already. A question naming a participant ("what did James say about the
    game?") then matches their turns by keyword and by vector whether a host
    wrote the name into the text or passed it only as the message's ``name``
    (measured on LoCoMo with ``memstore bench locomo --recall``: see
    BENCHMARKS.md). The stored text stays as captured."""
    if not speaker or text[: len(speaker) + 1].casefold() == f"{speaker}:".casefold():
        return text
    return f"{speaker}: {text}"


def labelled_sql(alias: str) -> str:
    """:func:`labelled_text` of row ``alias`` of ``l0_messages`` in SQL (the
    same on SQLite and PostgreSQL)."""
    t, s = f"{alias}.text", f"{alias}.speaker"
    return (
        f"(CASE WHEN {s} IS NULL OR {s} = '' OR lower(substr({t}, 1, length({s}) + 1)) = "
        f"lower({s} || ':') THEN {t} ELSE {s} || ': ' || {t} END)"
    )


MessageColumns = tuple[int, str, str, str, int, str | None]
"""``(low_info, text, cjk, stem, length, repeats)``: a plain
tuple, since a NamedTuple's construction cost more than some of its columns."""

ColumnTokens = tuple[list[str], list[str], list[str]]
"""The tokens of a full-text row's text, CJK and root columns."""


# unicode61's tokens (and the low-information check's words) are [^\W_]+,
# letters and digits; on ASCII that is [A-Za-z0-9]+, lowered. One byte table
# maps upper case to lower, keeps letters and digits and turns everything
# else into a space, so ``split()`` gives the tokens — about three times
# faster than a regex ``findall``.
_TOKEN_BYTES = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256)
)
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")
# The root column's words are the letter runs of three or more inside the
# tokens (memstore.text.stem._LONG_WORD_RE on lowered ASCII).
_LONG_LETTERS = re.compile(r"[a-z]{3,}")
_STOP_ROOTS = frozenset(word_root(w) for w in STOP_WORDS)

# The root column's part of each lowered ASCII token: its one root, or ""
# for a token without a word (numbers, "is", "12th"). Keyed by token rather
# than by word, so one lookup per token gives the column from the token list
# (no second tokenising pass for the words, no filter by length), and a
# message with a new token computes that token's root only (the cache keyed
# by word re-derived every word of a message on any miss). Measured on 20k
# messages of chat text: 22 -> 16 µs a message from a cold cache, 19 -> 15
# warm, the same columns. Not cached, so their message takes the general
# path: a token with two words ("abc1def", rare in chat) and a root the
# column would not tokenise back to itself ([a-z0-9]+: Snowball English
# gives lower-case letters for lower-case letters). Emptied when full.
_ROOTS: dict[str, str] = {}
_ROOTS_MAX = 200_000


def _token_part(token: str) -> str | None:
    """A token's part of the root column, or None if it is not cacheable."""
    words = _LONG_LETTERS.findall(token)
    if not words:
        return ""
    root = word_root(words[0])
    if len(words) > 1 or not _ASCII_TOKEN.fullmatch(root):
        return None
    return root


def _learn(tokens: list[str]) -> dict[str, str] | None:
    """The root column part of each of ``tokens``, the new ones cached; None
    if one of them cannot be cached (the others are)."""
    parts: dict[str, str] = {}
    learnt: dict[str, str] = {}
    cacheable = True
    for token in set(tokens):
        # get, not the lookup that just failed: another thread may empty
        # the cache at any point, and that only costs a root derived again.
        part = _ROOTS.get(token)
        if part is None:
            part = _token_part(token)
            if part is None:
                cacheable = False
                continue
            learnt[token] = part
        parts[token] = part
    if len(_ROOTS) + len(learnt) > _ROOTS_MAX:
        _ROOTS.clear()
    _ROOTS.update(learnt)
    return parts if cacheable else None


def _ascii_roots(tokens: list[str]) -> list[str] | None:
    """The root column's words for a message's lowered ASCII tokens, or None
    when one of them is not cacheable (see ``_ROOTS``)."""
    try:
        # Roots of "" (tokens without a word) drop out in the filter.
        return list(filter(None, map(_ROOTS.__getitem__, tokens)))
    except KeyError:
        pass
    parts = _learn(tokens)
    if parts is None:
        return None
    return list(filter(None, map(parts.__getitem__, tokens)))


def _repeated(column: str, tokens: list[str], stop: frozenset[str]) -> list[str]:
    """``document_stats``' parts for one column: each token other than ``stop``
    words that occurs more than once, in order of first occurrence."""
    # One count of every token (in C), stop words dropped while reading the
    # counts: conversation text nearly always repeats a function word, so the
    # former distinct-token checks and the filtered copy before counting were
    # paid per message for nothing (~40% of this function on chat text).
    counts = Counter(tokens)
    if len(counts) == len(tokens):
        return []
    return [f"{column}{t}:{n}" for t, n in counts.items() if n > 1 and t not in stop]


def _repeats(tokens: list[str], roots: list[str]) -> str | None:
    """``document_stats``' repeats for a row whose CJK column is empty."""
    parts = _repeated("0", tokens, STOP_WORDS) + _repeated("2", roots, _STOP_ROOTS)
    return " ".join(parts) or None


def _general(text: str) -> MessageColumns:
    latin, cjk = document_columns(text)
    stem = stem_text(latin)
    length, repeats = document_stats(latin, cjk, stem)
    return (int(is_low_information(text)), latin, cjk, stem, length, repeats)


def message_columns(text: str) -> MessageColumns:
    """The derived columns of one message's text (see the module docstring)."""
    if not text.isascii():
        return _general(text)
    raw = text.encode()
    tokens = raw.translate(_TOKEN_BYTES).decode().split()
    roots = _ascii_roots(tokens)
    if roots is None:
        return _general(text)
    label = LABEL_RE.match(text)
    if label:
        # The label's own tokens are not words of the message.
        tokens_in_label = raw[: label.end()].translate(_TOKEN_BYTES).split()
        body = tokens[len(tokens_in_label) :]
    else:
        body = tokens
    low_info = len(body) <= MAX_WORDS and FILLER_WORDS.issuperset(body)
    return (
        int(low_info),
        text,
        "",
        " ".join(roots),
        len(tokens) + len(roots),
        _repeats(tokens, roots),
    )


def message_tokens(text: str) -> tuple[int, ColumnTokens]:
    """``(length, tokens of the text, CJK and root columns)`` of one
    message's text, equal to tokenising :func:`message_columns`' columns,
    without the flag and repeats it also derives: what keyword search counts
    a waiting message's phrases in (memstore.search.tail) and what a user's
    in-memory postings hold (memstore.search.postings). On ASCII text the
    token list is the text column's tokens and the roots are the root
    column's (``_ROOTS`` holds only roots that tokenise back to themselves),
    so nothing is tokenised twice: scoring a waiting message of chat text
    took 6-7 µs instead of 27-32."""
    if text.isascii():
        tokens = text.encode().translate(_TOKEN_BYTES).decode().split()
        roots = _ascii_roots(tokens)
        if roots is not None:
            return len(tokens) + len(roots), (tokens, [], roots)
    _, latin, cjk, stem, length, _ = message_columns(text)
    return length, column_tokens(latin, cjk, stem)
