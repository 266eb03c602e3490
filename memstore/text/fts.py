"""Turn arbitrary user text into a safe FTS5 MATCH expression.

The FTS5 table this targets has three columns: ``text`` (``unicode61
remove_diacritics 2``) for Latin-script words, ``cjk`` holding
:func:`~memstore.text.cjk.cjk_bigrams` of the same text, and ``stem`` holding
:func:`~memstore.text.stem.stem_text` (English word roots, so "peanut
allergy" finds "allergic to peanuts"). User text is never
interpreted as FTS5 syntax: every term is emitted as a quoted FTS5 string,
and only word characters ever reach a term, so quotes, ``AND(``, ``NEAR``,
``*``, ``^``, ``col:`` and parentheses are inert.

Terms are OR-ed: BM25 already ranks documents that match more terms higher,
while AND would make a long natural-language question match nothing.
"""

from __future__ import annotations

import re

from memstore.errors import InvalidInputError
from memstore.text.cjk import CJK_CHAR_CLASS, cjk_bigrams, cjk_runs, run_bigrams
from memstore.text.fold import fold_diacritics
from memstore.text.stem import word_roots

__all__ = [
    "MAX_TERMS",
    "MAX_TERM_CHARS",
    "STOP_WORDS",
    "build_match",
    "document_columns",
    "query_terms",
    "quote_term",
]

MAX_TERMS = 32
"""Upper bound on terms in one MATCH expression (a pasted page stays cheap)."""

MAX_TERM_CHARS = 128
"""Longer "words" (base64, minified code) cannot match an indexed token
usefully and only make the expression large, so they are dropped."""

# Function words that dominate questions ("what did she say about ...") and
# carry no topic. Kept small on purpose: BM25's idf handles the rest, and
# contraction tails ("s", "t", "ll") appear because "'" splits words.
_STOP_WORDS_TEXT = """
    a an the is are was were be been being am do does did done doing have has had
    what which who whom whose when where why how i me my mine you your yours he him
    his she her hers it its we us our they them their this that these those there
    here of to in on at for with by from about into onto as and or but if then so
    than too very can could would should will shall may might must not no s t d ll
    re ve m
    """
STOP_WORDS: frozenset[str] = frozenset(_STOP_WORDS_TEXT.split())

# One CJK run, or one word of non-CJK letters/digits ("_" excluded: unicode61
# treats it as a separator, so it would only produce empty phrases).
_SCAN_RE = re.compile(f"(?P<cjk>[{CJK_CHAR_CLASS}]+)|(?P<word>[^\\W_{CJK_CHAR_CLASS}]+)")
_CJK_RUN_RE = re.compile(f"[{CJK_CHAR_CLASS}]+")
_COLUMN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def quote_term(term: str) -> str:
    """``term`` as an FTS5 string literal (inner double quotes doubled)."""
    return '"' + term.replace('"', '""') + '"'


def query_terms(query: str) -> tuple[list[str], list[str]]:
    """The ``(latin, cjk)`` search terms of ``query``, in order of appearance.

    Latin terms are words (deduplicated case-insensitively, stop words
    dropped unless nothing else would remain). CJK terms are the bigrams of
    each CJK run; a run of one character is returned as ``"X*"`` (see
    :func:`build_match`). At most :data:`MAX_TERMS` terms in total.
    """
    ordered: list[tuple[str, str]] = []  # (kind, term)
    seen: set[str] = set()
    for m in _SCAN_RE.finditer(query):
        word = m.group("word")
        if word is not None:
            key = word.casefold()
            if len(word) <= MAX_TERM_CHARS and key not in seen:
                seen.add(key)
                ordered.append(("latin", word))
            continue
        for run in cjk_runs(m.group("cjk")):
            # A lone character is only indexed as the first half of bigrams
            # (or alone); a prefix query finds both.
            grams = [run + "*"] if len(run) == 1 else run_bigrams(run)
            for gram in grams:
                if gram not in seen:
                    seen.add(gram)
                    ordered.append(("cjk", gram))
    content = [
        (kind, term) for kind, term in ordered if kind == "cjk" or term.casefold() not in STOP_WORDS
    ]
    chosen = (content or ordered)[:MAX_TERMS]
    latin = [t for kind, t in chosen if kind == "latin"]
    cjk = [t for kind, t in chosen if kind == "cjk"]
    return latin, cjk


def _cjk_literal(term: str) -> str:
    if term.endswith("*"):
        return quote_term(term[:-1]) + "*"
    return quote_term(term)


def build_match(
    query: str,
    *,
    text_column: str = "text",
    cjk_column: str = "cjk",
    stem_column: str | None = "stem",
) -> str | None:
    """A MATCH expression for ``query``, or ``None`` if nothing is searchable.

    >>> build_match('what did "Bob" say about 咖啡?')
    '{text}: ("Bob" OR "say") OR {stem}: ("bob" OR "say") OR {cjk}: ("咖啡")'

    ``stem_column=None`` leaves the root column out (for a two-column table).
    ``None`` means the caller should return no results without querying.
    The expression never raises in FTS5, whatever ``query`` holds.
    """
    for column in (text_column, cjk_column, stem_column or "stem"):
        if not _COLUMN_RE.fullmatch(column):
            raise InvalidInputError(f"not a plain column name: {column!r}")
    latin, cjk = query_terms(query)
    groups: list[str] = []
    if latin:
        groups.append(f"{{{text_column}}}: ({' OR '.join(map(quote_term, latin))})")
        roots = word_roots(latin) if stem_column else []
        if roots:
            groups.append(f"{{{stem_column}}}: ({' OR '.join(map(quote_term, roots))})")
    if cjk:
        groups.append(f"{{{cjk_column}}}: ({' OR '.join(map(_cjk_literal, cjk))})")
    return " OR ".join(groups) or None


def document_columns(text: str) -> tuple[str, str]:
    """Values for the ``(text, cjk)`` columns when indexing ``text``.

    CJK runs are replaced by a space in the ``text`` column: unicode61 would
    otherwise index "学Python编程" as one token, and a query for "python"
    would miss it. The runs stay searchable through the bigram column.
    Latin letters lose their diacritics (:func:`~memstore.text.fold.fold_diacritics`):
    FTS5 would fold them itself, PostgreSQL would not, and the query terms
    are folded the same way.
    Use this when the FTS table is not also the place the verbatim text is
    displayed from.
    """
    if text.isascii():  # no CJK, no diacritics (isascii is O(1))
        return text, ""
    return _CJK_RUN_RE.sub(" ", fold_diacritics(text)), cjk_bigrams(text)
