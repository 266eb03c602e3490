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
from memstore.text.terms import document_stats

__all__ = ["MessageColumns", "labelled_sql", "labelled_text", "message_columns"]


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


# unicode61's tokens (and the low-information check's words) are [^\W_]+,
# letters and digits; on ASCII that is [A-Za-z0-9]+, lowered. One byte table
# maps upper case to lower, keeps letters and digits and turns everything
# else into a space, so ``split()`` gives the tokens — about three times
# faster than a regex ``findall``.
_TOKEN_BYTES = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256)
)
# The root column's words are letter runs of three or more
# (memstore.text.stem._LONG_WORD_RE): the same table with digits as spaces.
_LETTER_BYTES = bytes(32 if 48 <= c <= 57 else c for c in _TOKEN_BYTES)
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")
_STOP_ROOTS = frozenset(word_root(w) for w in STOP_WORDS)

# Root of each lowered ASCII word. A root is kept here only if the root
# column tokenises it back to itself ([a-z0-9]+: Snowball English gives
# lower-case letters for lower-case letters); a word whose root does not is
# never cached, so its message takes the general path. Emptied when full.
_ROOTS: dict[str, str] = {}
_ROOTS_MAX = 200_000


def _ascii_roots(words: list[str]) -> list[str] | None:
    try:
        return list(map(_ROOTS.__getitem__, words))
    except KeyError:
        pass
    roots = [word_root(w) for w in words]
    if not all(map(_ASCII_TOKEN.fullmatch, roots)):
        return None
    if len(_ROOTS) > _ROOTS_MAX:
        _ROOTS.clear()
    _ROOTS.update(zip(words, roots, strict=True))
    return roots


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
    letters = raw.translate(_LETTER_BYTES).decode().split()
    roots = _ascii_roots([w for w in letters if len(w) > 2])
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
