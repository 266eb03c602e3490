"""The indexing text functions' fast paths give exactly what the plain versions gave.

``document_columns``, ``stem_text`` and ``is_low_information`` run for every
message captured or replayed, so they skip work (ASCII text has no CJK run,
roots come from a dict, the low-information check stops at the first content
word). The FTS index and the ``low_info`` flag must not change because of
that: the straightforward versions below are the oracle, checked on text
that mixes the cases each shortcut depends on.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.text import document_columns, is_low_information, stem_text
from memstore.text.cjk import CJK_CHAR_CLASS, cjk_bigrams, cjk_runs
from memstore.text.fold import fold_diacritics
from memstore.text.info import _PHATIC_CJK, FILLER_WORDS, LABEL_RE, MAX_WORDS
from memstore.text.stem import word_root

_CJK_RUN = re.compile(f"[{CJK_CHAR_CLASS}]+")
_STEM_WORD = re.compile(f"[^\\W\\d_{CJK_CHAR_CLASS}]+")
_INFO_WORD = re.compile(f"[^\\W_{CJK_CHAR_CLASS}]+")


def plain_document_columns(text: str) -> tuple[str, str]:
    return _CJK_RUN.sub(" ", fold_diacritics(text)), cjk_bigrams(text)


def plain_stem_text(text: str) -> str:
    words = _STEM_WORD.findall(fold_diacritics(text))
    return " ".join(word_root(w) for w in words if len(w) >= 3)


def plain_is_low_information(text: str) -> bool:
    body = LABEL_RE.sub("", text, count=1)
    words = [w.casefold() for w in _INFO_WORD.findall(body)]
    runs = cjk_runs(body)
    if len(words) + len(runs) > MAX_WORDS:
        return False
    if any(w not in FILLER_WORDS for w in words):
        return False
    return all(r in _PHATIC_CJK for r in runs)


# Pieces chosen so that the shortcuts' edge cases come up often: filler words
# in any case, CJK acknowledgements, labels, digits, "_", accents, full-width
# and compatibility forms NFKC changes, and words that stem.
_PIECES = [
    "ok",
    "OK",
    "Thanks",
    "noted",
    "got it",
    "好的",
    "嗯",
    "谢谢",
    "はい",
    "ﾊｲ",
    "네",
    "咖啡",
    "我喝咖啡",
    "Bob: ",
    "Dr. Who: ",
    "  Ann: ",
    "no",
    "allergies",
    "Allergic",
    "peanut_butter",
    "route66",
    "café",
    "İstanbul",
    "Straße",
    "ﬁle",
    "👍",
    "!",
    "?",
    " ",
    "\n",
    "12th",
    "学Python编程",
]
_texts = st.one_of(
    st.lists(st.sampled_from(_PIECES), max_size=16).map(" ".join),
    st.lists(st.sampled_from(_PIECES), max_size=16).map("".join),
    st.text(max_size=60),
)


@settings(max_examples=400, deadline=None)
@given(_texts)
def test_fast_paths_match_the_plain_versions(text: str) -> None:
    assert document_columns(text) == plain_document_columns(text)
    latin, _ = document_columns(text)
    assert stem_text(latin) == plain_stem_text(latin)
    assert stem_text(text) == plain_stem_text(text)
    assert is_low_information(text) == plain_is_low_information(text)


def test_fast_paths_on_chosen_cases() -> None:
    cases = [
        "ok " * 12,  # twelve filler words: still low information
        "ok " * 13,  # thirteen: content
        "ok " * 12 + "好的",  # twelve words and a run: content
        "Bob: 👍",
        "Bob: 好的 谢谢",
        "Noted.",
        "No.",
        "I am allergic to peanuts.",
        "Allergies ALLERGIES allergies",
        "",
    ]
    for text in cases:
        assert document_columns(text) == plain_document_columns(text), text
        assert stem_text(text) == plain_stem_text(text), text
        assert is_low_information(text) == plain_is_low_information(text), text
