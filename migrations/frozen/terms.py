"""Frozen copy (see memstore._migrations.frozen) of memstore.text as of the
migrations that use it.

A document as FTS5 counts it, computed in Python: tokens, length, repeated terms.

Keyword search ranks one user's messages with that user's BM25 statistics
(memstore.search.bm25), so it needs what FTS5's ``bm25()`` reads from its
index: each message's length in tokens and how often each query term occurs
in it. FTS5 tells us *whether* a message holds a term (a MATCH per term);
the length and the count of a term that occurs more than once are computed
here when the message is stored and kept next to it (``l0_messages.fts_len``,
``fts_repeats``).

:func:`fts_tokens` splits a column value as FTS5's ``unicode61
remove_diacritics 2`` tokenizer does: runs of letters and digits, lower-cased,
Latin letters without their diacritics. It agrees with
FTS5 on the text this project indexes (tested against FTS5 itself); it can
differ on characters newer than SQLite's Unicode tables, where a count may
then be off by one for that message.

Repeats leave out function words (``STOP_WORDS`` and their roots): they
repeat in almost every message, and a query only searches them when it has
nothing else, in which case search counts them from the text itself.
A change to ``STOP_WORDS`` therefore needs a rebuild of the L0 projection.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache

from .fts import STOP_WORDS
from .stem import word_root

__all__ = [
    "CJK_COLUMN",
    "STEM_COLUMN",
    "TEXT_COLUMN",
    "column_tokens",
    "document_stats",
    "fts_tokens",
    "is_common",
    "parse_repeats",
]

# Column numbers of the full-text tables (text, cjk, stem), as in their DDL.
TEXT_COLUMN, CJK_COLUMN, STEM_COLUMN = 0, 1, 2

_TOKEN_RE = re.compile(r"[^\W_]+")
_STOP_ROOTS = frozenset(word_root(w) for w in STOP_WORDS)


@lru_cache(maxsize=8192)
def _fold(char: str) -> str:
    """One character as unicode61 with ``remove_diacritics 2`` indexes it:
    simple case folding ("Σ" and "ς" -> "σ", "ſ" -> "s", but "ß" stays), then a
    Latin letter loses its diacritics ("é" -> "e"; Greek or Cyrillic accents
    stay) and a combining diacritic inside a word disappears."""
    folded = char.casefold()
    out = []
    for c in folded if len(folded) == 1 else char.lower():
        if 0x300 <= ord(c) <= 0x36F:
            continue
        parts = unicodedata.normalize("NFD", c)
        if (
            len(parts) > 1
            and parts[0].isascii()
            and all(0x300 <= ord(x) <= 0x36F for x in parts[1:])
        ):
            c = parts[0]
        out.append(c)
    return "".join(out)


def fts_tokens(value: str) -> list[str]:
    """``value``'s tokens as unicode61 with ``remove_diacritics 2`` makes them."""
    if value.isascii():
        return _TOKEN_RE.findall(value.lower())
    # One character at a time, as unicode61 does (str.lower() would apply
    # the final-sigma rule); a mark outside a word separates, as the regex does.
    return _TOKEN_RE.findall("".join(map(_fold, value)))


def column_tokens(latin: str, cjk: str, stem: str) -> tuple[list[str], list[str], list[str]]:
    """The tokens of the three columns of a full-text row."""
    return fts_tokens(latin), fts_tokens(cjk), fts_tokens(stem)


def is_common(column: int, token: str) -> bool:
    """True for function words, whose repeats are not stored (see the module doc)."""
    if column == TEXT_COLUMN:
        return token in STOP_WORDS
    return column == STEM_COLUMN and token in _STOP_ROOTS


def document_stats(latin: str, cjk: str, stem: str) -> tuple[int, str | None]:
    """``(length, repeats)`` of a full-text row: its token count over all
    columns (FTS5's document size) and the tokens that occur more than once,
    as ``"<column><token>:<count>"`` separated by spaces (None when none do)."""
    columns = column_tokens(latin, cjk, stem)
    parts: list[str] = []
    for col, tokens in enumerate(columns):
        if len(set(tokens)) == len(tokens):
            continue
        for token, n in Counter(tokens).items():
            if n > 1 and not is_common(col, token):
                parts.append(f"{col}{token}:{n}")
    return sum(map(len, columns)), " ".join(parts) or None


def parse_repeats(value: str | None) -> dict[tuple[int, str], int]:
    """:func:`document_stats`' repeats as ``{(column, token): count}``."""
    if not value:
        return {}
    out: dict[tuple[int, str], int] = {}
    for part in value.split(" "):
        key, _, n = part.rpartition(":")
        out[(int(key[0]), key[1:])] = int(n)
    return out
