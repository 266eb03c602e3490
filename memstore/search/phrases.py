"""The phrases of a keyword query as FTS5 matches them, and how often a
message holds each: shared by the ranking of indexed messages
(memstore.search.bm25) and of messages still waiting for their keyword rows
(memstore.search.tail)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from memstore.text.fts import document_columns, query_terms, quote_term
from memstore.text.stem import stem_text, word_roots
from memstore.text.terms import CJK_COLUMN, STEM_COLUMN, TEXT_COLUMN, fts_tokens, is_common

COLUMN_NAMES = {TEXT_COLUMN: "text", CJK_COLUMN: "cjk", STEM_COLUMN: "stem"}


@dataclass(frozen=True)
class Phrase:
    """One quoted term of the MATCH expression, in the column it searches."""

    column: int
    tokens: tuple[str, ...]
    prefix: bool
    expr: str  # a MATCH expression for this term alone

    @property
    def counted(self) -> bool:
        """True when its count in a message must be taken from the text
        (no stored repeats for it)."""
        return self.prefix or len(self.tokens) != 1 or is_common(self.column, self.tokens[0])


def _phrase(column: int, term: str) -> Phrase:
    prefix = term.endswith("*")
    word = term[:-1] if prefix else term
    literal = quote_term(word) + ("*" if prefix else "")
    return Phrase(
        column, tuple(fts_tokens(word)), prefix, f"{{{COLUMN_NAMES[column]}}}: {literal}"
    )


def query_phrases(query: str) -> list[Phrase]:
    """The phrases of ``build_match(query)``, one per quoted term (a term
    given twice in different spellings counts twice, as in FTS5)."""
    return list(_phrases_of(query))


@functools.lru_cache(maxsize=256)
def _phrases_of(query: str) -> tuple[Phrase, ...]:
    # Cached: recall searches memories and messages with the same query, and
    # parsing it (terms, roots, quoting) cost ~0.1 ms a search.
    return tuple(_parse_phrases(query))


def _parse_phrases(query: str) -> list[Phrase]:
    latin, cjk = query_terms(query)
    out = [_phrase(TEXT_COLUMN, w) for w in latin]
    out += [_phrase(STEM_COLUMN, r) for r in word_roots(latin)] if latin else []
    out += [_phrase(CJK_COLUMN, g) for g in cjk]
    return [p for p in out if p.tokens]


def count_phrase(phrase: Phrase, tokens: list[str]) -> int:
    """Occurrences of ``phrase`` in one column's ``tokens``."""
    want = phrase.tokens
    n = len(want)
    if n == 1:
        # One token (every phrase but a few CJK ones): a scan in C, not a
        # Python loop over the column (a message matching a function word
        # was counted token by token).
        if not phrase.prefix:
            return tokens.count(want[0])
        return sum(1 for t in tokens if t.startswith(want[0]))
    head = list(want[:-1])
    hits = 0
    for i in range(len(tokens) - n + 1):
        if tokens[i : i + n - 1] != head:
            continue
        last = tokens[i + n - 1]
        if last == want[-1] or (phrase.prefix and last.startswith(want[-1])):
            hits += 1
    return hits


def text_counts(phrases: list[Phrase], text: str, which: Sequence[int]) -> list[int]:
    """Occurrences of ``phrases[i]`` for each ``i`` in ``which`` in ``text``,
    tokenising only the columns those phrases search (stemming, the costly
    part, only for root phrases)."""
    latin, cjk = document_columns(text)
    columns: dict[int, list[str]] = {}
    for i in which:
        column = phrases[i].column
        if column not in columns:
            source = latin if column == TEXT_COLUMN else cjk if column == CJK_COLUMN else None
            columns[column] = fts_tokens(stem_text(latin) if source is None else source)
    return [count_phrase(phrases[i], columns[phrases[i].column]) for i in which]
