"""Latin letters without their diacritics, so "creme" finds "crème" on every engine.

SQLite's FTS5 tokenizer (``unicode61 remove_diacritics 2``) folds "crème" to
"creme" itself; PostgreSQL's ``simple`` text search configuration does not.
The full-text columns and the query terms are therefore folded here, in
Python, before either engine sees them, with the same rule FTS5 applies: a
Latin letter whose canonical decomposition is an ASCII letter plus combining
diacritics becomes that letter ("é" -> "e", "Ấ" -> "A"), and a combining
diacritic written on its own disappears. Other scripts keep
their accents (Greek "ά" stays), as in FTS5, and case is kept. Since FTS5
folds the same letters the same way, folding first changes nothing it
indexes or matches (``tests/text/test_text_fold.py`` checks every letter
against FTS5).
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["fold_diacritics"]

# The Latin blocks FTS5's diacritic table covers: Latin-1 Supplement,
# Extended-A and -B, and Latin Extended Additional.
_LATIN_BLOCKS = ((0x00C0, 0x024F), (0x1E00, 0x1EFF))
# The combining marks FTS5 drops inside a word (it splits the word at the
# other ones in U+0300-U+036F, so those are left alone here).
_MARKS = frozenset(
    {*range(0x300, 0x305), *range(0x306, 0x30D), 0x30F, 0x311, 0x31B}
    | {*range(0x323, 0x329), 0x32D, 0x32E, 0x330, 0x331}
)
# Decomposable letters FTS5 nevertheless keeps: A with dot above and macron.
_KEPT = frozenset({0x1E0, 0x1E1})


def _table() -> dict[str, str]:
    table = dict.fromkeys(map(chr, _MARKS), "")
    for lo, hi in _LATIN_BLOCKS:
        for cp in range(lo, hi + 1):
            parts = unicodedata.normalize("NFD", chr(cp))
            base, marks = parts[0], parts[1:]
            if (
                marks
                and cp not in _KEPT
                and base.isascii()
                and base.isalpha()
                and all(ord(m) in _MARKS for m in marks)
            ):
                table[chr(cp)] = base
    return table


_FOLD = _table()
# A regex over just these characters: about twice as fast as str.translate
# on accented text, and text with none (emoji, CJK) is one scan in C.
_FOLDED_RE = re.compile("[" + "".join(map(re.escape, _FOLD)) + "]")
_fold_match = _FOLD.__getitem__


def fold_diacritics(text: str) -> str:
    """``text`` with Latin letters' diacritics removed (see the module doc)."""
    if text.isascii():  # O(1), and nearly every message
        return text
    return _FOLDED_RE.sub(lambda m: _fold_match(m.group()), text)
