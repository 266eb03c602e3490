"""Reading import files line by line, and the report every import returns.

A bad line never stops an import: it is recorded with its file and line
number, every good line is imported, and the caller (the CLI) exits non-zero
when anything was skipped. A file that is not UTF-8 text is refused whole: its
"lines" would be noise, not data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from memstore.errors import InvalidInputError
from memstore.timeutil import parse_when

MAX_LINE_BYTES = 16 * 1024 * 1024
# What one import may read in all (its files together): the text is held in
# memory while it is imported.
MAX_IMPORT_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class Problem:
    where: str  # "file:line" or a file name
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class ImportReport:
    """What an import did. ``counts`` names what was read and stored."""

    counts: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def problem(self, where: str, message: str) -> None:
        self.problems.append(Problem(where, message))

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "problems": [str(p) for p in self.problems]}


def read_text(
    source: Path | IO[bytes],
    name: str,
    *,
    budget: ReadBudget | None = None,
    report: ImportReport | None = None,
) -> str:
    """The whole text of ``source``; refuses binary or non-UTF-8 content and
    input past the budget's total as soon as it is seen (``/dev/zero`` or an
    endless pipe fail at once, in bounded memory). A line longer than
    ``MAX_LINE_BYTES`` is dropped as it arrives and reported in ``report``
    (it reads as an empty line, so later line numbers hold); without a
    report it is an error."""
    budget = budget if budget is not None else ReadBudget()
    if isinstance(source, Path):
        with source.open("rb") as f:
            data = _read_bounded(f, name, budget, report)
    else:
        data = _read_bounded(source, name, budget, report)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"{name} is not UTF-8 text (byte {exc.start}): nothing imported"
        ) from None


class ReadBudget:
    """How many bytes an import may still read, across all its files."""

    def __init__(self, limit: int = MAX_IMPORT_BYTES) -> None:
        self.limit = self.left = limit

    @property
    def total(self) -> str:
        mib = self.limit / (1024 * 1024)
        return f"{mib:g} MiB" if mib >= 1 else f"{self.limit} bytes"


# Below MAX_LINE_BYTES: ``_read_bounded`` relies on a chunk never holding a
# whole over-long line.
_CHUNK = 1024 * 1024


def _read_bounded(
    f: IO[bytes], name: str, budget: ReadBudget, report: ImportReport | None
) -> bytearray:
    buf = bytearray()
    line, line_start, seen = 1, 0, 0  # line_start: where the current line begins in buf
    skipping = False  # inside a line being dropped: discard up to its newline
    too_long = f"line longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB"
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        if seen < 65536 and b"\x00" in chunk[: 65536 - seen]:
            raise InvalidInputError(f"{name} is a binary file, not text: nothing imported")
        seen += len(chunk)
        if len(chunk) > budget.left:
            raise InvalidInputError(
                f"{name}:{line}: the import is larger than {budget.total} "
                "(the limit of one import): nothing imported; split the input"
            )
        budget.left -= len(chunk)
        piece = chunk
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            piece, skipping = piece[nl:], False  # the newline stays: numbering holds
        # Lines wholly inside a chunk are shorter than the chunk, so only the
        # line that continues in buf can outgrow the limit.
        first = piece.find(b"\n")
        if len(buf) - line_start + (len(piece) if first < 0 else first) > MAX_LINE_BYTES:
            if report is None:
                raise InvalidInputError(f"{name}:{line}: {too_long}: nothing imported")
            report.problem(f"{name}:{line}", too_long)
            del buf[line_start:]
            if first < 0:
                skipping = True
                continue
            piece = piece[first:]
        buf += piece
        last = piece.rfind(b"\n")
        if last >= 0:
            line += piece.count(b"\n")
            line_start = len(buf) - (len(piece) - last - 1)
    return buf  # decoded in place: no second copy of a large import


def json_lines(text: str, name: str, report: ImportReport) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every line holding a JSON object; anything
    else non-blank becomes a problem."""
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_BYTES:
            report.problem(f"{name}:{lineno}", "line longer than 16 MiB")
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            report.problem(f"{name}:{lineno}", f"not JSON ({exc.args[0] if exc.args else exc})")
            continue
        if not isinstance(obj, dict):
            report.problem(f"{name}:{lineno}", f"expected a JSON object, got {type(obj).__name__}")
            continue
        yield lineno, obj


def when(value: object) -> datetime:
    """``parse_when`` with every failure an InvalidInputError (instants near
    the ends of the calendar overflow while being normalised to UTC)."""
    try:
        return parse_when(value)
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, InvalidInputError):
            raise
        raise InvalidInputError(f"timestamp out of range: {value!r}") from None


def strict_id(name: str, value: object) -> str:
    """An id by the API's rules, and refused (never aliased) when those rules
    would change it: "alice " must not become alice."""
    from memstore.derive.messages.capture import check_id

    cleaned = check_id(name, value)
    if cleaned != value:
        raise InvalidInputError(
            f"{name} {value!r} has surrounding whitespace or control characters"
        )
    return cleaned


def require_str(obj: dict[str, Any], key: str, *, optional: bool = False) -> str | None:
    """A string field; raises InvalidInputError naming the field otherwise."""
    value = obj.get(key)
    if value is None:
        if optional:
            return None
        raise InvalidInputError(f'"{key}" is missing' if key not in obj else f'"{key}" is null')
    if not isinstance(value, str):
        raise InvalidInputError(f'"{key}" must be a string, not {type(value).__name__}')
    if not value.strip() and not optional:
        raise InvalidInputError(f'"{key}" is empty')
    return value


__all__ = [
    "MAX_IMPORT_BYTES",
    "MAX_LINE_BYTES",
    "ImportReport",
    "Problem",
    "ReadBudget",
    "json_lines",
    "read_text",
    "require_str",
    "strict_id",
    "when",
]
