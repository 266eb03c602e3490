"""Make captured text safe to store and recalled text safe to inject.

Capture must never crash on what a host hands it (bytes, lone surrogates,
NUL, multi-part OpenAI content), and must not store the memory blocks that a
host (or memstore itself) injected into the prompt: storing them would feed
recalled memories back in as if the user had said them, and they would be
recalled again, growing without end. Recall, in turn, escapes the memories
it injects so a stored text can never open or close one of those blocks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from memstore.errors import InvalidInputError

__all__ = [
    "INJECTION_TAGS",
    "clean_text",
    "escape_injection",
    "sanitize_message",
    "strip_injected",
    "truncate_chars",
    "truncate_utf8",
]

INJECTION_TAGS: tuple[str, ...] = (
    "memory-context",  # Hermes wraps prefetched memory in this
    "relevant-memories",
    "user-persona",
    "scene-navigation",
    "standing-instructions",
    "conversation-excerpts",
    "memstore-recall",  # what memstore's own recall block is wrapped in
)

# The same tag-start pattern drives stripping and escaping, so escaping is
# guaranteed to neutralise everything stripping would match. Whitespace after
# "<" or "/" is tolerated because a lenient reader (an LLM) would still see a
# tag there; the look-ahead keeps "<memory-contextual>" from matching.
# Possessive quantifiers and the bound on attributes keep hostile input
# ("<" + 100k spaces, thousands of unterminated tags) linear instead of
# quadratic; a real tag's attributes are far shorter than the bound.
_NAMES = "|".join(re.escape(t) for t in INJECTION_TAGS)
_TAG_START = rf"<\s*+(?P<close>/)?\s*+(?P<name>{_NAMES})(?![\w-])"
_TAG_RE = re.compile(rf"{_TAG_START}(?P<rest>[^<>]{{0,1000}}+)>", re.IGNORECASE)
_TAG_START_RE = re.compile(_TAG_START, re.IGNORECASE)

# C0 controls except \t \n \r; they break terminals, JSON consumers and FTS.
_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")

# U+2039 looks like "<" to a reader but is not a tag opener; unlike "&lt;" it
# cannot be turned back into "<" by an HTML unescape, and NFKC leaves it alone.
_LOOKALIKE_LT = "\u2039"

TRUNCATION_MARKER = "\n…[truncated by memstore: {n} bytes omitted]"
ELLIPSIS = "…"


def _fix_surrogates(s: str) -> str:
    # A well-formed high+low pair (e.g. from JSON "\ud83d\ude00" decoded by a
    # lenient parser) becomes the real character; anything unpaired becomes
    # U+FFFD. UTF-16 with surrogatepass round-trips exactly that way.
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_text(s: str | bytes) -> str:
    """Return ``s`` as valid text: bytes decoded as UTF-8 (bad bytes → U+FFFD),
    lone surrogates → U+FFFD, C0 control characters other than tab, newline
    and carriage return removed. Never raises."""
    if isinstance(s, bytes | bytearray | memoryview):
        text = bytes(s).decode("utf-8", "replace")
    elif isinstance(s, str):
        text = s
    else:  # defensive: hosts are not type-checked
        try:
            text = str(s)
        except Exception:
            return ""
    if _SURROGATE_RE.search(text):
        text = _fix_surrogates(text)
    return _CONTROL_RE.sub("", text)


def strip_injected(s: str) -> str:
    """Remove injected memory blocks (any of :data:`INJECTION_TAGS`).

    Tags match case-insensitively, may carry attributes and span lines.
    Nested blocks of the same name are balanced; an opening tag that is
    never closed removes everything after it (a truncated injection is still
    an injection); a stray closing tag is removed on its own. Everything
    outside the blocks is kept byte for byte.
    """
    if "<" not in s:
        return s
    out: list[str] = []
    keep_from = 0  # start of the text not yet copied to ``out``
    block_name: str | None = None  # name of the block being removed
    depth = 0
    for m in _TAG_RE.finditer(s):
        name = m.group("name").lower()
        closing = m.group("close") is not None
        self_closing = not closing and m.group("rest").rstrip().endswith("/")
        if block_name is None:
            out.append(s[keep_from : m.start()])
            keep_from = m.end()
            if not closing and not self_closing:
                block_name, depth = name, 1
        elif name == block_name and not self_closing:
            depth += -1 if closing else 1
            if depth == 0:
                block_name = None
                keep_from = m.end()
    if block_name is None:
        out.append(s[keep_from:])
    return "".join(out)


def escape_injection(s: str) -> str:
    """Neutralise every injection tag in ``s`` so that it can be placed inside
    an injected block without opening or closing one: the ``<`` of such a tag
    becomes a look-alike (U+2039). ``strip_injected(escape_injection(x))`` is
    ``escape_injection(x)`` for every ``x``."""
    if "<" not in s:
        return s
    return _TAG_START_RE.sub(lambda m: _LOOKALIKE_LT + m.group(0)[1:], s)


def _utf8_prefix(data: bytes, limit: int) -> int:
    """Largest n <= limit such that data[:n] ends on a code-point boundary."""
    n = max(0, min(limit, len(data)))
    # Back off over UTF-8 continuation bytes (0b10xxxxxx).
    while 0 < n < len(data) and (data[n] & 0xC0) == 0x80:
        n -= 1
    return n


def truncate_utf8(s: str, max_bytes: int) -> tuple[str, bool]:
    """Cut ``s`` so its UTF-8 encoding, marker included, fits ``max_bytes``.

    Returns ``(text, truncated)``. The cut falls on a code-point boundary and
    the marker says how many bytes were dropped. When ``max_bytes`` is too
    small even for the marker, a bare prefix is returned (still flagged).
    """
    if max_bytes < 0:
        raise InvalidInputError(f"max_bytes must be >= 0, got {max_bytes}")
    # surrogatepass: never raise on text that did not go through clean_text.
    data = s.encode("utf-8", "surrogatepass")
    total = len(data)
    if total <= max_bytes:
        return s, False
    # The omitted count is at most ``total``, so a marker sized for ``total``
    # is an upper bound on the real marker's length: one pass suffices.
    room = max_bytes - len(TRUNCATION_MARKER.format(n=total).encode("utf-8"))
    if room < 0:
        cut = _utf8_prefix(data, max_bytes)
        return data[:cut].decode("utf-8", "surrogatepass"), True
    cut = _utf8_prefix(data, room)
    head = data[:cut].decode("utf-8", "surrogatepass")
    return head + TRUNCATION_MARKER.format(n=total - cut), True


def truncate_chars(s: str, n: int) -> str:
    """At most ``n`` code points; when cut, the last one is an ellipsis.

    Never splits a surrogate pair that a lenient decoder left in ``s``.
    Grapheme clusters (emoji sequences, combining marks) may be split, which
    changes how the end looks but never yields invalid text.
    """
    if n < 0:
        raise InvalidInputError(f"n must be >= 0, got {n}")
    if len(s) <= n:
        return s
    if n == 0:
        return ""
    head = s[: n - 1]
    if head and "\ud800" <= head[-1] <= "\udbff":
        head = head[:-1]
    return head.rstrip() + ELLIPSIS


def _text_of_part(part: Any) -> str | bytes | None:
    # OpenAI chat parts: {"type": "text", "text": "..."}; the Responses API
    # uses "input_text"/"output_text"; the Assistants API nests
    # {"text": {"value": "..."}}. Images, audio, files carry no text to keep.
    if isinstance(part, str | bytes):
        return part
    if not isinstance(part, Mapping):
        return None
    kind = part.get("type", "text")
    if kind not in ("text", "input_text", "output_text"):
        return None
    text = part.get("text")
    if isinstance(text, Mapping):
        text = text.get("value")
    return text if isinstance(text, str | bytes) else None


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return clean_text(content)
    if isinstance(content, bytes | bytearray | memoryview):
        return clean_text(bytes(content))
    if isinstance(content, bool):
        return ""
    if isinstance(content, int | float):
        return str(content)
    if isinstance(content, Mapping):
        content = [content]
    if isinstance(content, list | tuple):
        texts = (_text_of_part(p) for p in content)
        return "\n".join(clean_text(t) for t in texts if t is not None)
    return ""


def sanitize_message(content: Any, max_bytes: int) -> tuple[str, bool]:
    """Text to store for one captured message, and whether it was truncated.

    ``content`` may be ``str``, ``bytes`` or an OpenAI-style list of parts
    (text parts are joined with newlines, other parts dropped). The text is
    cleaned, stripped of injected memory blocks and of surrounding
    whitespace, then truncated to ``max_bytes`` UTF-8 bytes. Empty or
    whitespace-only results give ``("", False)``: the caller drops them.
    """
    if max_bytes < 1:
        raise InvalidInputError(f"max_bytes must be >= 1, got {max_bytes}")
    text = strip_injected(_content_text(content)).strip()
    if not text:
        return "", False
    return truncate_utf8(text, max_bytes)
