"""``message_columns`` gives exactly what the separate text functions give.

The L0 projection derives a message's low-information flag, full-text
columns and BM25 statistics in one pass (with a shortcut for ASCII text); the
functions it stands for are the oracle here, on text that mixes the cases
the shortcut depends on: labels, filler words, repeated words and roots,
stop words, digits, "_", letters next to digits, non-ASCII and CJK text.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.derive.messages.columns import MessageColumns, message_columns, message_tokens
from memstore.text import document_columns, is_low_information, stem_text
from memstore.text.terms import column_tokens, document_stats
from tests.text.test_text_fast_paths import _PIECES
from tests.text.test_text_fast_paths import _texts as _fast_path_texts


def separately(text: str) -> MessageColumns:
    latin, cjk = document_columns(text)
    stem = stem_text(latin)
    length, repeats = document_stats(latin, cjk, stem)
    return (int(is_low_information(text)), latin, cjk, stem, length, repeats)


# On top of the fast-path pieces: stop words and roots that repeat, labels
# that end in digits, tokens mixing letters and digits, apostrophes.
_ASCII_PIECES = [
    "the",
    "The",
    "is",
    "x1: ",
    "allergy",
    "running",
    "runs",
    "Running",
    "abc1def",
    "ab1",
    "42",
    ",",
    "\t",
    "'s",
    "don't",
    *_PIECES,
]
_texts = st.one_of(
    _fast_path_texts,
    st.lists(st.sampled_from(_ASCII_PIECES), max_size=20).map(" ".join),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=80),
)


@settings(max_examples=300, deadline=None)
@given(_texts)
def test_message_columns_match_the_separate_functions(text: str) -> None:
    assert message_columns(text) == separately(text)


def test_message_columns_on_chosen_cases() -> None:
    cases = [
        "ok " * 12,  # twelve filler words: still low information
        "ok " * 13,  # thirteen: content
        "Bob: thanks!",  # the label is not a word of the message
        "Bob: thanks Bob",  # ... but the same word after it is
        "turn 7: we talked about trips and trips and dinners in town",
        "running runs Running RUNS the the the",  # repeated tokens and roots
        "I am allergic to peanuts.",
        "Café au lait",  # not ASCII: the general path
        "",
        "   ",
        "abc1def 12th 42 route66 x",  # tokens mixing letters and digits
        "Bob: 42",
    ]
    for text in cases:
        assert message_columns(text) == separately(text), text
    # The cases above reach both outcomes of each column that can differ.
    got = [message_columns(t) for t in cases]
    assert {c[0] for c in got} == {0, 1}
    assert any(c[5] for c in got) and any(c[5] is None for c in got)


def tokens_of_columns(text: str) -> tuple[int, tuple[list[str], list[str], list[str]]]:
    _, latin, cjk, stem, length, _ = separately(text)
    return length, column_tokens(latin, cjk, stem)


@settings(max_examples=300, deadline=None)
@given(_texts)
def test_message_tokens_are_the_columns_tokens(text: str) -> None:
    assert message_tokens(text) == tokens_of_columns(text)


def test_message_tokens_on_chosen_cases() -> None:
    cases = [
        "running runs Running RUNS the the the",
        "Bob: I am allergic to peanuts, allergies run in the family",
        "abc1def 12th 42 route66 x",  # a token with two words: the general path
        "Café au lait, crème brûlée",  # not ASCII
        "我们明天去北京 and Tokyo",  # CJK bigrams
        "is an ok",  # no word long enough for a root
        "",
    ]
    for text in cases:
        assert message_tokens(text) == tokens_of_columns(text), text
    lengths = {t: message_tokens(t)[0] for t in cases}
    assert lengths[""] == 0 and lengths["is an ok"] == 3
    assert message_tokens(cases[4])[1][1], "the CJK column has tokens"
