"""Sanitising, CJK bigrams and FTS5 query building, against a real FTS5 table."""

from __future__ import annotations

import sqlite3
import unicodedata
from collections.abc import Iterator

import pytest
import sqlean
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.errors import InvalidInputError
from memstore.text import (
    INJECTION_TAGS,
    build_match,
    cjk_bigrams,
    clean_text,
    document_columns,
    escape_injection,
    has_cjk,
    is_low_information,
    query_terms,
    quote_term,
    sanitize_message,
    stem_text,
    strip_injected,
    truncate_chars,
    truncate_utf8,
    word_root,
)
from memstore.text.fts import MAX_TERMS

# ---------------------------------------------------------------- clean_text


def test_clean_text_bytes_invalid_utf8_replaced() -> None:
    assert clean_text(b"caf\xc3\xa9 \xff ok") == "café \ufffd ok"


def test_clean_text_lone_surrogates_replaced_pairs_joined() -> None:
    assert clean_text("a\ud800b\udc00c") == "a\ufffdb\ufffdc"
    # A well-formed pair left as two code points becomes the real character.
    assert clean_text("\ud83d\ude00") == "😀"
    assert clean_text("end\ud83d") == "end\ufffd"


def test_clean_text_controls_removed_but_whitespace_kept() -> None:
    assert clean_text("a\x00b\x01c\x1bd\x7f\te\nf\rg") == "abcd\x7f\te\nf\rg"


@settings(max_examples=200)
@given(
    st.one_of(
        st.binary(),
        st.text(
            # Hypothesis never generates surrogates by itself; mix some in.
            alphabet=st.characters() | st.integers(0xD800, 0xDFFF).map(chr)
        ),
    )
)
def test_clean_text_never_raises_and_is_valid_utf8(value: str | bytes) -> None:
    out = clean_text(value)
    out.encode("utf-8")  # raises on a surviving lone surrogate
    assert not any(ord(c) < 0x20 and c not in "\t\n\r" for c in out)
    assert clean_text(out) == out


# ---------------------------------------------------------------- strip / escape


def test_strip_injected_all_tags_case_attributes_multiline() -> None:
    for tag in INJECTION_TAGS:
        text = f"before <{tag.upper()} source='x' n=2>\nline1\nline2\n</{tag}> after"
        assert strip_injected(text) == "before  after"


def test_strip_injected_unclosed_strips_to_end_and_stray_close_removed() -> None:
    assert strip_injected("keep <memory-context>\nsecret") == "keep "
    assert strip_injected("a </relevant-memories> b") == "a  b"


def test_strip_injected_nested_and_self_closing() -> None:
    text = "x<memory-context>a<memory-context>b</memory-context>c</memory-context>y"
    assert strip_injected(text) == "xy"
    inner = "x<memory-context><memstore-recall>r</memstore-recall>m</memory-context>y"
    assert strip_injected(inner) == "xy"
    assert strip_injected("a<user-persona/>b") == "ab"


def test_strip_injected_keeps_everything_else_verbatim() -> None:
    text = "if a < b and c > d:\n    x = '<div>' 😀 我喝咖啡 <memory-contextual> </ memory>"
    assert strip_injected(text) == text


def test_strip_and_escape_stay_linear_on_hostile_input() -> None:
    # These took seconds to minutes with a backtracking pattern; now instant.
    spaces = "<" + " " * 200_000 + "x"
    assert strip_injected(spaces) == spaces
    assert escape_injection(spaces) == spaces
    unterminated = "<memory-context" * 20_000 + "tail"
    assert strip_injected(unterminated) == unterminated
    assert escape_injection(unterminated).count("<") == 1  # "<memory-contexttail" is no tag


def test_escape_injection_neutralises_tags() -> None:
    escaped = escape_injection("hi </memory-context><MEMSTORE-RECALL x>< user-persona")
    assert "<" not in escaped  # every "<" here opened a tag
    assert strip_injected(escaped) == escaped
    assert escape_injection("a < b <div>") == "a < b <div>"
    # The look-alike survives normalisation (a host may NFKC its prompt).
    assert unicodedata.normalize("NFKC", escaped) == escaped


_tagish = st.lists(
    st.one_of(
        st.sampled_from([f"<{t}>" for t in INJECTION_TAGS] + [f"</{t}>" for t in INJECTION_TAGS]),
        st.sampled_from(["< /Memory-Context >", "<user-persona a='1'/>", "<", ">", "/", "\n"]),
        st.text(max_size=8),
    ),
    max_size=12,
).map("".join)


@settings(max_examples=200)
@given(_tagish)
def test_escape_then_strip_is_identity(text: str) -> None:
    escaped = escape_injection(text)
    assert strip_injected(escaped) == escaped


@settings(max_examples=200)
@given(_tagish)
def test_strip_injected_is_idempotent(text: str) -> None:
    once = strip_injected(text)
    assert strip_injected(once) == once


# ---------------------------------------------------------------- truncation


def test_truncate_utf8_fits_and_marks() -> None:
    text = "咖" * 1000  # 3 bytes each
    out, cut = truncate_utf8(text, 200)
    assert cut
    assert len(out.encode("utf-8")) <= 200
    head, marker = out.split("\n…", 1)
    assert set(head) == {"咖"}
    omitted = 3000 - len(head.encode("utf-8"))
    assert marker == f"[truncated by memstore: {omitted} bytes omitted]"


def test_truncate_utf8_short_text_untouched_and_tiny_limits() -> None:
    assert truncate_utf8("héllo", 6) == ("héllo", False)
    out, cut = truncate_utf8("😀😀😀", 5)  # no room for the marker: bare prefix
    assert (out, cut) == ("😀", True)
    assert truncate_utf8("abc", 0) == ("", True)
    with pytest.raises(InvalidInputError):
        truncate_utf8("abc", -1)


@settings(max_examples=200)
@given(st.text(), st.integers(min_value=0, max_value=300))
def test_truncate_utf8_never_exceeds_and_is_valid(text: str, limit: int) -> None:
    out, cut = truncate_utf8(text, limit)
    assert len(out.encode("utf-8")) <= limit or not cut
    assert cut == (len(text.encode("utf-8")) > limit)
    if not cut:
        assert out == text


def test_truncate_chars() -> None:
    assert truncate_chars("hello world", 20) == "hello world"
    assert truncate_chars("hello world", 7) == "hello…"
    assert truncate_chars("abc", 0) == ""
    # Never leave half of a surrogate pair.
    assert truncate_chars("ab\ud83d\ude00cd", 4) == "ab…"
    with pytest.raises(InvalidInputError):
        truncate_chars("abc", -1)


@settings(max_examples=200)
@given(st.text(), st.integers(min_value=0, max_value=50))
def test_truncate_chars_bounds(text: str, n: int) -> None:
    out = truncate_chars(text, n)
    assert len(out) <= n
    out.encode("utf-8")


# ---------------------------------------------------------------- sanitize_message


def test_sanitize_message_forms() -> None:
    parts = [
        {"type": "text", "text": "look at this"},
        {"type": "image_url", "image_url": {"url": "data:..."}},
        {"type": "text", "text": "<memory-context>old</memory-context>please"},
    ]
    assert sanitize_message(parts, 1000) == ("look at this\nplease", False)
    assert sanitize_message(b"  hi\x00 there  ", 1000) == ("hi there", False)
    assert sanitize_message("<memstore-recall>x</memstore-recall>  \n", 1000) == ("", False)
    assert sanitize_message("   ", 1000) == ("", False)
    assert sanitize_message(None, 1000) == ("", False)
    assert sanitize_message([{"type": "image_url"}], 1000) == ("", False)


def test_sanitize_message_truncates_large() -> None:
    text, cut = sanitize_message("x" * 100_000, 64 * 1024)
    assert cut
    assert len(text.encode("utf-8")) <= 64 * 1024
    assert text.endswith("bytes omitted]")


# ---------------------------------------------------------------- CJK


def test_cjk_bigrams() -> None:
    assert cjk_bigrams("我每天早上喝咖啡") == "我每 每天 天早 早上 上喝 喝咖 咖啡"
    assert cjk_bigrams("I like 猫 and コーヒー") == "猫 コー ーヒ ヒー"
    assert cjk_bigrams("커피를 좋아해요") == "커피 피를 좋아 아해 해요"
    assert cjk_bigrams("only latin") == ""
    # Extension B, and a compatibility ideograph folded to its unified form.
    assert cjk_bigrams("𠀀𠀁") == "𠀀𠀁"
    assert cjk_bigrams("\uf900") == "\u8c48"
    assert cjk_bigrams("ｺｰﾋｰ") == "コー ーヒ ヒー"  # halfwidth katakana


def test_has_cjk() -> None:
    assert has_cjk("abc 咖啡")
    assert has_cjk("ひらがな") and has_cjk("カタカナ") and has_cjk("한국어")
    assert has_cjk("\U0002a700")
    assert not has_cjk("café, naïve — ok 😀")


# ---------------------------------------------------------------- FTS5


ROWS = [
    "Alice cooked pasta for dinner with her sister",
    "The weather was nice, so Bob went hiking in the mountains",
    "我每天早上喝咖啡",
    "東京で寿司を食べました",
    "Caroline went to the LGBTQ support group on Sunday",
    "She's a naïve café owner who loves crème brûlée",
    "我在学Python编程",
    "커피를 좋아해요",
]


@pytest.fixture()
def conn() -> Iterator[sqlite3.Connection]:
    c = _fts_table()
    c.executemany(
        "INSERT INTO t(rowid, text, cjk, stem) VALUES (?, ?, ?, ?)",
        [(i, *_columns(r)) for i, r in enumerate(ROWS)],
    )
    yield c
    c.close()


def _fts_table() -> sqlite3.Connection:
    """An FTS5 table laid out like l0_fts / l1_fts."""
    c = sqlean.connect(":memory:")
    c.execute(
        "CREATE VIRTUAL TABLE t USING fts5("
        'text, cjk, stem, tokenize="unicode61 remove_diacritics 2")'
    )
    return c


def _columns(text: str) -> tuple[str, str, str]:
    # Verbatim text, as a table that is also displayed from would hold it.
    return text, cjk_bigrams(text), stem_text(text)


def search(conn: sqlite3.Connection, query: str) -> list[str]:
    expr = build_match(query)
    if expr is None:
        return []
    rows = conn.execute(
        "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t), rowid", (expr,)
    ).fetchall()
    return [ROWS[r[0]] for r in rows]


def test_chinese_two_characters(conn: sqlite3.Connection) -> None:
    assert search(conn, "咖啡") == ["我每天早上喝咖啡"]
    assert search(conn, "你喝咖啡吗？")[0] == "我每天早上喝咖啡"


def test_japanese_and_korean(conn: sqlite3.Connection) -> None:
    assert search(conn, "寿司を食べたい") == ["東京で寿司を食べました"]
    assert search(conn, "커피") == ["커피를 좋아해요"]


def test_single_cjk_character_is_prefix(conn: sqlite3.Connection) -> None:
    assert build_match("咖") == '{cjk}: ("咖"*)'
    assert search(conn, "咖") == ["我每天早上喝咖啡"]


def test_english_ranking_and_diacritics(conn: sqlite3.Connection) -> None:
    hits = search(conn, "What did Alice cook for dinner? pasta")
    assert hits[0] == ROWS[0]
    assert search(conn, "When did Caroline go to the support group?")[0] == ROWS[4]
    assert search(conn, "naive cafe")[0] == ROWS[5]
    assert search(conn, "CRÈME BRULEE")[0] == ROWS[5]


def test_mixed_script_token_needs_document_columns(conn: sqlite3.Connection) -> None:
    # Verbatim, unicode61 indexes "学python编程" as one token: "python" misses
    # in the text column (the root column, built from words, finds it anyway).
    exact_only = build_match("python", stem_column=None)
    assert conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (exact_only,)).fetchall() == []
    latin, cjk = document_columns("我在学Python编程")
    conn.execute(
        "INSERT INTO t(rowid, text, cjk, stem) VALUES (100, ?, ?, ?)",
        (latin, cjk, stem_text(latin)),
    )
    rows = conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (exact_only,))
    assert [r[0] for r in rows] == [100]


def test_stop_words_dropped_only_when_other_terms_remain() -> None:
    assert query_terms("What is the weather?") == (["weather"], [])
    assert query_terms("the who") == (["the", "who"], [])
    assert query_terms("Caroline's") == (["Caroline"], [])


def test_terms_deduplicated_and_capped() -> None:
    latin, cjk = query_terms("Paris paris PARIS")
    assert latin == ["Paris"] and cjk == []
    many = " ".join(f"word{i}" for i in range(100))
    assert len(query_terms(many)[0]) == MAX_TERMS
    assert len(query_terms("咖啡" * 5000)[1]) <= MAX_TERMS


def test_quote_term_doubles_quotes() -> None:
    assert quote_term('say "hi"') == '"say ""hi"""'


def test_nothing_searchable_gives_none() -> None:
    for q in ["", "   ", "\t\n", "?!.,;", "😀🎉", "___", "\x00", "-- ** ()"]:
        assert build_match(q) is None, q


def test_bad_column_name_rejected() -> None:
    with pytest.raises(InvalidInputError):
        build_match("x", text_column="text} OR {cjk")


HOSTILE = [
    '"',
    '"""',
    'say "hello',
    "AND(",
    "a AND",
    "OR OR NOT",
    "*",
    "foo*",
    "NEAR(a b)",
    "NEAR(a b, 2)",
    "text:foo",
    "col:",
    "{text}: x",
    "^start",
    "((unbalanced",
    "unbalanced))",
    "-excluded +required",
    "emoji 😀🎉 only",
    "",
    "   ",
    "!!!???",
    "x" * 10_000,
    "word " * 2_000,
    "咖啡" * 5_000,
    "nul\x00byte",
    "lone \ud800 surrogate",
    "tab\tnew\nline",
    "'; DROP TABLE t; --",
    "a:b:c",
    '"咖啡" AND "東京"',
]


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_queries_never_raise(conn: sqlite3.Connection, query: str) -> None:
    search(conn, query)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_match_never_raises_property(query: str) -> None:
    # A module-level connection would be shared across examples; a fresh
    # in-memory table per example keeps the test independent and is cheap.
    c = _fts_table()
    try:
        c.execute("INSERT INTO t VALUES (?, ?, ?)", _columns("hello world 我喝咖啡"))
        expr = build_match(query)
        if expr is not None:
            c.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()
    finally:
        c.close()


# ---------------------------------------------------------------- word roots


def test_roots_join_inflections_and_y_ic_pairs() -> None:
    same = [
        ("peanut", "peanuts"),
        ("allergy", "allergic"),
        ("allergy", "allergies"),
        ("hiking", "hiked"),
        ("photography", "photographs"),
        ("history", "historical"),
        ("Running", "runs"),
    ]
    for a, b in same:
        assert word_root(a) == word_root(b), (a, b)
    for a, b in [("party", "part"), ("study", "stud"), ("city", "cite"), ("news", "new")]:
        assert word_root(a) != word_root(b), (a, b)


def test_stem_text_skips_cjk_digits_and_short_words() -> None:
    assert stem_text("I am allergic to peanuts 2023 我喝咖啡 x_y") == "allerg peanut"
    assert stem_text("") == ""


# ---------------------------------------------------------------- low information


@pytest.mark.parametrize(
    "msg",
    [
        "Good to know!",
        "Noted.",
        "Got it 👍",
        "ok",
        "OK!!",
        "Thanks for sharing!",
        "👍",
        "🙂👍",
        "",
        "Have a nice day!",
        "assistant: I'll keep that in mind.",
        "Sounds great, see you soon?",
        "好的",
        "收到，谢谢",
        "わかりました",
    ],
)
def test_low_information_messages(msg: str) -> None:
    assert is_low_information(msg)


@pytest.mark.parametrize(
    "msg",
    [
        "I am allergic to peanuts.",
        "Yes",
        "No.",
        "Not really",
        "42",
        "Thanks, Caroline!",
        "ok, see you at 5",
        "Great, the vet said Max is fine",
        "我对花生过敏",
        "好的，明天见",
        # Long runs of pleasantries are kept: demoting content by mistake costs more.
        "thanks thanks thanks thanks thanks thanks thanks thanks thanks thanks thanks thanks ok",
    ],
)
def test_content_messages(msg: str) -> None:
    assert not is_low_information(msg)


def test_match_searches_roots_next_to_exact_words() -> None:
    assert build_match("peanut allergy") == (
        '{text}: ("peanut" OR "allergy") OR {stem}: ("peanut" OR "allerg")'
    )
    assert build_match("peanut", stem_column=None) == '{text}: ("peanut")'
    assert build_match("咖啡") == '{cjk}: ("咖啡")'
