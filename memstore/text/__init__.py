"""Text handling shared by capture and search: sanitising, CJK bigrams, word roots,
FTS5 queries, content-free messages."""

from memstore.text.cjk import cjk_bigrams, has_cjk
from memstore.text.fold import fold_diacritics
from memstore.text.fts import build_match, document_columns, query_terms, quote_term
from memstore.text.info import is_low_information
from memstore.text.sanitize import (
    INJECTION_TAGS,
    clean_text,
    escape_injection,
    sanitize_message,
    strip_injected,
    truncate_chars,
    truncate_utf8,
)
from memstore.text.stem import stem_text, word_root

__all__ = [
    "INJECTION_TAGS",
    "build_match",
    "cjk_bigrams",
    "clean_text",
    "document_columns",
    "escape_injection",
    "fold_diacritics",
    "has_cjk",
    "is_low_information",
    "query_terms",
    "quote_term",
    "sanitize_message",
    "stem_text",
    "strip_injected",
    "truncate_chars",
    "truncate_utf8",
    "word_root",
]
