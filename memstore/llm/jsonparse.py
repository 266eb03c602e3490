"""Pull the JSON value out of a language model's answer.

Models asked for JSON still wrap it in code fences, chat around it, leave
trailing commas, put raw newlines inside strings, answer in Python syntax
(single quotes, ``True``/``None``), sprinkle ``//`` comments or typeset the
quotes (“key”). :func:`parse_json_output` copes with all of that and raises
:class:`~memstore.errors.LLMOutputError` (carrying the raw text) otherwise.

The approach: try the text (then each fenced block) as plain JSON; failing
that, find the first plausible ``{`` or ``[``, walk to its matching bracket
with a small lexer that knows about strings, repair the span as it goes, and
hand the result to :func:`json.loads`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from memstore.errors import LLMOutputError

_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\r?\n?(.*?)```", re.DOTALL)
_OPENERS = {"{": "}", "[": "]"}
_SMART_QUOTES = "“”„‟″"  # typographic double quotes a model may use as delimiters
_VALID_ESCAPES = set('"\\/bfnrt')
_HEX = set("0123456789abcdefABCDEF")
_LITERAL_AT = re.compile(r"(?:true|false|null|True|False|None)\b")
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_CONTROL_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_MAX_RAW_IN_MESSAGE = 200


def parse_json_output(text: str) -> Any:
    """Return the first JSON value in ``text``; raise ``LLMOutputError`` if none parses."""
    if not isinstance(text, str):
        raise LLMOutputError(f"model output is {type(text).__name__}, not text", raw=repr(text))
    cleaned = text.lstrip("\ufeff")
    if not cleaned.strip():
        raise LLMOutputError("model output is empty", raw=text)

    problems: list[str] = []
    # Fenced blocks first: prose around them may hold stray brackets.
    for block in _FENCE.findall(cleaned):
        found, value = _parse_source(block, problems)
        if found:
            return value
    found, value = _parse_source(cleaned, problems)
    if found:
        return value

    detail = problems[0] if problems else "no JSON object or array found"
    raise LLMOutputError(f"{detail}; model output began {_preview(text)}", raw=text)


def _preview(text: str) -> str:
    short = text.strip()
    if len(short) > _MAX_RAW_IN_MESSAGE:
        short = short[:_MAX_RAW_IN_MESSAGE] + "…"
    return repr(short)


def _parse_source(source: str, problems: list[str]) -> tuple[bool, Any]:
    stripped = source.strip()
    if not stripped:
        return False, None
    try:
        return True, json.loads(stripped)
    except ValueError:
        pass

    pos = 0
    while True:
        start = _next_start(source, pos)
        if start < 0:
            return False, None
        end, repaired, status = _scan(source, start)
        if status == "unclosed":
            # Searching inside a truncated value would return a fragment of it as if
            # it were the answer, so stop here.
            problems.append(
                f"JSON starting at offset {start} is never closed (answer cut off at max_tokens?)"
            )
            return False, None
        if status == "ok":
            try:
                return True, json.loads(repaired, strict=False)
            except ValueError as exc:
                problems.append(f"invalid JSON at offset {start}: {exc}")
        else:
            problems.append(f"mismatched brackets in JSON starting at offset {start}")
        # Skip past this span rather than into it, for the same reason as above.
        pos = max(end, start + 1)


def _next_start(text: str, pos: int) -> int:
    """Index of the next ``{``/``[`` that looks like the start of a JSON value."""
    n = len(text)
    for i in range(pos, n):
        ch = text[i]
        if ch not in _OPENERS:
            continue
        j = _skip_blank(text, i + 1)
        if j >= n:
            return i  # a lone opener at the very end: report it as truncated
        nxt = text[j]
        if nxt in "\"'" or nxt in _SMART_QUOTES:
            return i
        if ch == "{":
            if nxt == "}":
                return i
        elif nxt in "]{[-" or nxt.isdigit() or _LITERAL_AT.match(text, j):
            return i
    return -1


def _skip_blank(text: str, j: int) -> int:
    """Index of the first character at or after ``j`` that is not blank or a comment."""
    n = len(text)
    while j < n:
        if text[j] in " \t\r\n":
            j += 1
        elif text.startswith("//", j):
            nl = text.find("\n", j)
            j = n if nl < 0 else nl
        elif text.startswith("/*", j):
            close = text.find("*/", j + 2)
            j = n if close < 0 else close + 2
        else:
            break
    return j


def _scan(text: str, start: int) -> tuple[int, str, str]:
    """Walk from the opener at ``start`` to its closer, repairing as we go.

    Returns ``(end, repaired, status)`` where ``end`` is the index after the
    last character consumed and status is ``"ok"``, ``"unclosed"`` or
    ``"mismatch"``.
    """
    out: list[str] = []
    stack: list[str] = []
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == '"' or ch == "'" or ch in _SMART_QUOTES:
            i = _string(text, i, out)
            continue
        if ch in _OPENERS:
            stack.append(_OPENERS[ch])
            out.append(ch)
            i += 1
            continue
        if ch in "}]":
            if not stack or stack.pop() != ch:
                return i + 1, "", "mismatch"
            _drop_trailing_comma(out)
            out.append(ch)
            i += 1
            if not stack:
                return i, "".join(out), "ok"
            continue
        if ch == "/" and text.startswith("//", i):
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if ch == "/" and text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = n if close < 0 else close + 2
            continue
        if ch.isalpha() or ch == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            out.append(_PY_LITERALS.get(word, word))
            i = j
            continue
        out.append(ch)
        i += 1
    return n, "".join(out), "unclosed"


def _drop_trailing_comma(out: list[str]) -> None:
    j = len(out) - 1
    while j >= 0 and out[j].isspace():
        j -= 1
    if j >= 0 and out[j] == ",":
        del out[j]


def _string(text: str, i: int, out: list[str]) -> int:
    """Copy the string opening at ``text[i]`` to ``out`` as a valid JSON string.

    Returns the index after its closing quote (or ``len(text)`` if unclosed).
    """
    opener = text[i]
    if opener == '"':
        closers = '"'
    elif opener == "'":
        closers = "'"
    else:  # typographic: models close with either curly quote or a plain one
        closers = _SMART_QUOTES + '"'
    out.append('"')
    i += 1
    n = len(text)
    while i < n:
        ch = text[i]
        if ch in closers:
            out.append('"')
            return i + 1
        if ch == "\\":
            nxt = text[i + 1] if i + 1 < n else ""
            if nxt in _VALID_ESCAPES:
                out.append("\\" + nxt)
                i += 2
            elif nxt == "u" and all(c in _HEX for c in text[i + 2 : i + 6]) and i + 6 <= n:
                out.append(text[i : i + 6])
                i += 6
            elif nxt == "'":
                out.append("'")  # \' is Python, not JSON
                i += 2
            else:
                out.append("\\\\")  # a lone backslash (regexes, Windows paths) is literal
                i += 1
            continue
        if ch == '"':
            out.append('\\"')  # a plain quote inside a single- or curly-quoted string
        elif ch < " ":
            out.append(_CONTROL_ESCAPES.get(ch, f"\\u{ord(ch):04x}"))
        else:
            out.append(ch)
        i += 1
    return n
