"""Frozen copy (see memstore._migrations.frozen) of memstore.text as of the
migrations that use it.

CJK text as overlapping bigrams, for a second FTS5 column.

FTS5's ``unicode61`` tokenizer treats a whole run of Han (or kana) characters
as one token, so "咖啡" never matches "我每天早上喝咖啡". Splitting each CJK run
into overlapping bigrams on both sides (document and query) makes any word of
two or more characters findable without a dictionary-based segmenter; the
``trigram`` tokenizer would miss two-character words, the most common length
in Chinese. Non-CJK text is dropped here because the ``text`` column already
indexes it.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["CJK_CHAR_CLASS", "cjk_bigrams", "cjk_runs", "has_cjk", "run_bigrams"]

# Code-point ranges treated as CJK. Extensions and compatibility blocks are
# included so rare characters (names, historic forms) still form bigrams.
_RANGES: tuple[tuple[int, int], ...] = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x2E80, 0x2EFF),  # CJK Radicals Supplement
    (0x2F00, 0x2FDF),  # Kangxi Radicals
    (0x3005, 0x3007),  # 々 〆 〇: iteration/closing marks and ideographic zero
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana (includes the prolonged sound mark ー)
    (0x3130, 0x318F),  # Hangul Compatibility Jamo
    (0x31F0, 0x31FF),  # Katakana Phonetic Extensions
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xA960, 0xA97F),  # Hangul Jamo Extended-A
    (0xAC00, 0xD7AF),  # Hangul Syllables
    (0xD7B0, 0xD7FF),  # Hangul Jamo Extended-B
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0xFF66, 0xFF9F),  # Halfwidth Katakana
    (0xFFA0, 0xFFDC),  # Halfwidth Hangul
    (0x1AFF0, 0x1B16F),  # Kana Extended-B, Kana Supplement, Extended-A, Small Kana
    (0x20000, 0x2A6DF),  # Extension B
    (0x2A700, 0x2EE5F),  # Extensions C, D, E, F, I
    (0x2F800, 0x2FA1F),  # CJK Compatibility Ideographs Supplement
    (0x30000, 0x323AF),  # Extensions G, H
)

CJK_CHAR_CLASS = "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in _RANGES)
"""The body of a regex character class (without brackets) matching one CJK character."""

_RUN_RE = re.compile(f"[{CJK_CHAR_CLASS}]+")
_CHAR_RE = re.compile(f"[{CJK_CHAR_CLASS}]")


def has_cjk(text: str) -> bool:
    """True when ``text`` holds at least one CJK character."""
    return _CHAR_RE.search(text) is not None


def cjk_runs(text: str) -> list[str]:
    """The maximal runs of CJK characters in ``text``, NFKC-normalised, in order.

    NFKC folds halfwidth katakana to fullwidth and compatibility ideographs to
    their unified forms, so a query typed one way finds text written the
    other; it is applied on both the document and the query side.
    """
    runs: list[str] = []
    # Normalise each raw run on its own (not the whole text) so that the
    # document and the query side split runs at exactly the same places, and
    # text without CJK is never normalised at all.
    for raw in _RUN_RE.findall(text):
        runs.extend(_RUN_RE.findall(unicodedata.normalize("NFKC", raw)))
    return runs


def run_bigrams(run: str) -> list[str]:
    """Overlapping bigrams of one run; a one-character run is kept as it is."""
    if len(run) <= 1:
        return [run] if run else []
    return [run[i : i + 2] for i in range(len(run) - 1)]


def cjk_bigrams(text: str) -> str:
    """Space-separated overlapping bigrams of every CJK run in ``text``.

    >>> cjk_bigrams("我喝咖啡 and 猫")
    '我喝 喝咖 咖啡 猫'
    """
    return " ".join(bigram for run in cjk_runs(text) for bigram in run_bigrams(run))
