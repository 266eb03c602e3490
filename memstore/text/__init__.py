"""Text handling shared by capture and search: sanitising, CJK bigrams, FTS5 queries."""

from memstore.text.cjk import cjk_bigrams, has_cjk
from memstore.text.fts import build_match, document_columns, query_terms, quote_term
from memstore.text.sanitize import (
    INJECTION_TAGS,
    clean_text,
    escape_injection,
    sanitize_message,
    strip_injected,
    truncate_chars,
    truncate_utf8,
)

__all__ = [
    "INJECTION_TAGS",
    "build_match",
    "cjk_bigrams",
    "clean_text",
    "document_columns",
    "escape_injection",
    "has_cjk",
    "query_terms",
    "quote_term",
    "sanitize_message",
    "strip_injected",
    "truncate_chars",
    "truncate_utf8",
]
