"""Reading a TencentDB Agent Memory data directory (the upstream's files).

::

    conversations/*.jsonl   L0, one message per line: sessionKey, sessionId,
                            recordedAt (ISO), id, role, content, timestamp (epoch
                            ms); older files hold grouped records
                            {sessionKey, sessionId, recordedAt, messages: [...]}
    records/*.jsonl         L1 memory records, append-only: a later line with
                            the same id supersedes an earlier one
    vectors.db              the upstream's SQLite store; its l1_records table
                            lists the records still live (``upstream_live``)
    scene_blocks/*.md       L2 blocks: a META block (created, updated, summary,
                            heat) between -----META-START----- and
                            -----META-END-----, then the markdown body
    persona.md              L3 profile, followed by a generated scene navigation

Everything is validated item by item; problems carry file and line.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstore.derive.messages.capture import ROLES
from memstore.derive.prompts import MEMORY_TYPES
from memstore.errors import InvalidInputError
from memstore.porting.report import (
    ImportReport,
    ReadBudget,
    json_lines,
    read_text,
    require_str,
    strict_id,
    when,
)
from memstore.porting.upstream_live import VECTORS_DB, live_record_ids, split
from memstore.timeutil import to_iso

META_START = "-----META-START-----"
META_END = "-----META-END-----"
# The navigation the upstream appends to persona.md: memstore composes its own.
_NAVIGATION = re.compile(r"(?:^|\n)(?:-{3,}\s*\n)?#{1,6}[^\n]*Scene Navigation", re.IGNORECASE)


@dataclass(frozen=True)
class Message:
    session_key: str
    id: str
    role: str
    content: str
    timestamp: str  # ISO-8601


@dataclass(frozen=True)
class Record:
    id: str
    where: str
    content: str
    type: str
    priority: int
    scene_name: str
    source_message_ids: list[str]
    session_key: str
    activity_start: str | None
    activity_end: str | None
    updated_at: str | None
    # The upstream's timestamp trail (a merge writes the union of the merged
    # records' trails): how ``upstream_live`` tells merged from deleted.
    timestamps: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scene:
    filename: str
    name: str
    summary: str
    heat: int
    body: str


@dataclass
class UpstreamData:
    root: Path
    messages: list[Message] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    scenes: list[Scene] = field(default_factory=list)
    persona: str | None = None

    @property
    def size(self) -> int:
        return len(self.messages) + len(self.records) + len(self.scenes) + 1


def read_upstream(
    root: Path, report: ImportReport, *, budget: ReadBudget | None = None
) -> UpstreamData:
    if not root.is_dir():
        raise InvalidInputError(f"{root} is not a directory (expected an upstream data dir)")
    parts = [root / p for p in ("conversations", "records", "scene_blocks", "persona.md")]
    if not any(p.exists() for p in parts):
        raise InvalidInputError(
            f"{root} holds none of conversations/, records/, scene_blocks/, persona.md: "
            "not a TencentDB Agent Memory data directory"
        )
    data = UpstreamData(root)
    budget = budget or ReadBudget()  # the directory's files together

    def _text(path: Path) -> str | None:
        return _read(path, root, report, budget)

    for path in _files(root / "conversations", (".jsonl",)):
        text = _text(path)
        if text is not None:
            data.messages.extend(_conversation_file(text, _rel(path, root), report))
    latest: dict[str, Record] = {}
    for path in _files(root / "records", (".jsonl", ".json")):
        text = _text(path)
        if text is None:
            continue
        name = _rel(path, root)
        for lineno, obj in json_lines(text, name, report):
            try:
                rec = _record(obj, f"{name}:{lineno}")
            except InvalidInputError as exc:
                report.problem(f"{name}:{lineno}", str(exc))
                continue
            latest.pop(rec.id, None)  # re-insert: order follows the latest line
            latest[rec.id] = rec
    data.records = _live(root, list(latest.values()), report)
    for path in _files(root / "scene_blocks", (".md",)):
        text = _text(path)
        if text is not None:
            try:
                data.scenes.append(parse_scene(text, path.name))
            except InvalidInputError as exc:
                report.problem(_rel(path, root), str(exc))
    persona = root / "persona.md"
    if persona.is_file():
        text = _text(persona)
        if text is not None:
            data.persona = strip_navigation(text) or None
    return data


def _live(root: Path, records: list[Record], report: ImportReport) -> list[Record]:
    """The records the upstream still serves (``upstream_live``), counted."""
    path = root / VECTORS_DB
    if not path.is_file():
        return records
    try:
        ids = live_record_ids(path)
    except InvalidInputError as exc:
        report.problem(VECTORS_DB, str(exc))
        return []
    got = split(records, ids)
    report.add("records live upstream", len(got.live))
    report.add("records merged upstream (not imported)", len(got.merged))
    report.add("records deleted upstream (not imported)", len(got.deleted))
    return got.live


def _files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    if not folder.is_dir():
        return []
    # Date-named shards sort chronologically, which "later line wins" needs.
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in suffixes)


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root))


def _read(path: Path, root: Path, report: ImportReport, budget: ReadBudget) -> str | None:
    try:
        return read_text(path, _rel(path, root), budget=budget, report=report)
    except InvalidInputError as exc:
        report.problem(_rel(path, root), str(exc))
    except OSError as exc:
        report.problem(_rel(path, root), f"cannot read: {exc.strerror or exc}")
    return None


def _conversation_file(text: str, name: str, report: ImportReport) -> list[Message]:
    out: list[Message] = []
    for lineno, obj in json_lines(text, name, report):
        where = f"{name}:{lineno}"
        try:
            if isinstance(obj.get("messages"), list):  # the older grouped form
                group = {k: obj.get(k) for k in ("sessionKey", "sessionId", "recordedAt")}
                for i, m in enumerate(obj["messages"]):
                    if not isinstance(m, dict):
                        report.problem(where, f"messages[{i}] is not an object")
                        continue
                    try:
                        out.append(_message({**group, **m}))
                    except InvalidInputError as exc:
                        report.problem(where, f"messages[{i}]: {exc}")
            else:
                out.append(_message(obj))
        except InvalidInputError as exc:
            report.problem(where, str(exc))
    return out


def _message(obj: dict[str, Any]) -> Message:
    session = strict_id("sessionKey", require_str(obj, "sessionKey"))
    role = (require_str(obj, "role") or "").strip().lower()
    if role not in ROLES:
        raise InvalidInputError(f'"role" must be one of {sorted(ROLES)}, not {role!r}')
    content = require_str(obj, "content") or ""
    ts = obj.get("timestamp")
    if ts is None:
        ts = obj.get("recordedAt")
    if ts is None:
        raise InvalidInputError('"timestamp" and "recordedAt" are both missing')
    if isinstance(ts, bool) or not isinstance(ts, int | float | str):
        raise InvalidInputError('"timestamp" must be epoch milliseconds')
    stamp = to_iso(when(ts / 1000.0 if isinstance(ts, int | float) else ts))
    mid = obj.get("id")
    if mid in (None, ""):
        # Stable across re-imports: the same line always gets the same id.
        digest = hashlib.sha256(f"{session}\x1f{stamp}\x1f{role}\x1f{content}".encode())
        mid = f"tdai:{digest.hexdigest()[:24]}"
    elif not isinstance(mid, str):
        raise InvalidInputError('"id" must be a string')
    return Message(session, strict_id("id", mid), role, content, stamp)


def _record(obj: dict[str, Any], where: str) -> Record:
    rid = strict_id("id", require_str(obj, "id"))
    content = " ".join((require_str(obj, "content") or "").split())
    mtype = require_str(obj, "type") or ""
    if mtype not in MEMORY_TYPES:
        raise InvalidInputError(f'"type" must be one of {list(MEMORY_TYPES)}, not {mtype!r}')
    priority = obj.get("priority", 50)
    if isinstance(priority, bool) or not isinstance(priority, int | float):
        raise InvalidInputError('"priority" must be a number')
    sources = obj.get("source_message_ids", [])
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise InvalidInputError('"source_message_ids" must be a list of strings')
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        raise InvalidInputError('"metadata" must be an object')
    updated = obj.get("updatedAt") or obj.get("createdAt")
    return Record(
        id=rid,
        where=where,
        content=content,
        type=mtype,
        priority=max(-1, min(100, int(priority))),
        scene_name=str(obj.get("scene_name") or "").strip(),
        source_message_ids=list(sources),
        session_key=str(obj.get("sessionKey") or "").strip(),
        activity_start=_iso_or_none(meta.get("activity_start_time")),
        activity_end=_iso_or_none(meta.get("activity_end_time")),
        updated_at=_iso_or_none(updated),
        timestamps=tuple(t for t in obj.get("timestamps") or [] if isinstance(t, str)),
    )


def _iso_or_none(value: object) -> str | None:
    if value in (None, ""):
        return None
    try:
        return to_iso(when(value))
    except InvalidInputError:
        return None


def parse_scene(text: str, filename: str) -> Scene:
    name = Path(filename).stem.replace("_", " ").strip() or filename
    start, end = text.find(META_START), text.find(META_END)
    if start == -1 or end == -1 or end < start:
        body = text.strip()
        if not body:
            raise InvalidInputError("empty scene block")
        return Scene(filename, name, "", 0, body)
    meta = text[start + len(META_START) : end]
    fields: dict[str, str] = {}
    for line in meta.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip().lower()] = value.strip()
    try:
        heat = int(fields.get("heat") or 0)
    except ValueError:
        raise InvalidInputError(f"heat must be an integer, not {fields['heat']!r}") from None
    body = text[end + len(META_END) :].strip()
    return Scene(filename, name, fields.get("summary", ""), max(heat, 0), body)


def strip_navigation(persona: str) -> str:
    m = _NAVIGATION.search(persona)
    return (persona[: m.start()] if m else persona).strip()


__all__ = ["Message", "Record", "Scene", "UpstreamData", "parse_scene", "read_upstream",
           "strip_navigation"]  # fmt: skip
