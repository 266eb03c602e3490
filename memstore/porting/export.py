"""Data portability: a user's events as JSONL (``memstore export``), restored by
``memstore import --format memstore``; and a readable Markdown copy.

The JSONL is the log itself: replaying it gives the same memories, scenes,
persona and conversations, because every table is a projection of it. On
restore the events get new positions in the target log, so the two payload
fields that name positions (an extraction's ``cursor_position`` and a scene
run's ``memory_cursor``) are mapped to the new ones. Idempotency keys come
along (events without one get ``restore:<event id>``), so restoring the same
file twice appends nothing the second time.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from memstore.derive.messages.events import MessagesCaptured
from memstore.errors import EventError, InvalidInputError
from memstore.event_types import register_all
from memstore.events.log import NewEvent, StoredEvent
from memstore.events.types import Event
from memstore.porting.erased import FLAG, Erased
from memstore.porting.events_io import EXPORT_FORMAT, event_to_dict
from memstore.porting.report import ImportReport, json_lines, when

if TYPE_CHECKING:
    from memstore.store import Store

PAGE = 1000
POSITION_FIELDS = ("cursor_position", "memory_cursor")


def export_events(store: Store, user_id: str | None) -> Iterator[dict[str, Any]]:
    """A header, then every event of ``user_id`` (all users when None), in log order."""
    yield {"format": EXPORT_FORMAT, "user_id": user_id, "head": store.event_count()}
    after = 0
    while True:
        page = store.read_events(after=after, user_id=user_id, limit=PAGE)
        if not page:
            return
        for e in page:
            yield event_to_dict(e)
        after = page[-1].position


class _Positions:
    """Old log positions → new ones, for positions named inside payloads."""

    def __init__(self) -> None:
        self.old: list[int] = []
        self.new: list[int] = []

    def add(self, old: int, new: int) -> None:
        self.old.append(old)
        self.new.append(new)

    def map(self, position: int) -> int:
        # The newest restored event at or before the old position.
        i = bisect.bisect_right(self.old, position) - 1
        return self.new[i] if i >= 0 else 0


def _decode(obj: dict[str, Any]) -> tuple[int, NewEvent]:
    for key in ("type", "stream"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise InvalidInputError(f'"{key}" must be a non-empty string')
    position, version = obj.get("position"), obj.get("version")
    if not isinstance(position, int) or isinstance(position, bool) or position < 1:
        raise InvalidInputError('"position" must be a positive integer')
    if not isinstance(version, int) or isinstance(version, bool):
        raise InvalidInputError('"version" must be an integer')
    if not isinstance(obj.get("payload"), dict):
        raise InvalidInputError('"payload" must be an object')
    user = obj.get("user_id", "")
    if not isinstance(user, str):
        raise InvalidInputError('"user_id" must be a string')
    try:
        payload = register_all().decode(obj["type"], version, dict(obj["payload"]))
    except EventError as exc:
        raise InvalidInputError(str(exc)) from None
    key = obj.get("idempotency_key") or f"restore:{obj.get('event_id') or position}"
    return position, NewEvent(
        stream=obj["stream"],
        payload=payload,
        user_id=user,
        occurred_at=when(obj.get("occurred_at")),
        idempotency_key=str(key),
        causation_id=obj.get("causation_id"),
        correlation_id=obj.get("correlation_id"),
    )


def _remap(payload: Event, positions: _Positions) -> Event:
    changes = {
        f: positions.map(int(getattr(payload, f)))
        for f in POSITION_FIELDS
        if hasattr(payload, f) and int(getattr(payload, f)) > 0
    }
    return dataclasses.replace(payload, **changes) if changes else payload


def _holds_erased(erased: Erased, user_id: str, payload: Event) -> bool:
    """A capture holding a message a partial erasure removed."""
    if not erased.messages or erased.allow or not isinstance(payload, MessagesCaptured):
        return False
    return any(
        erased.covers(user_id, session_id=payload.session_id, message_id=str(m.get("id", "")))
        is not None
        for m in payload.messages
    )


def restore_events(
    store: Store,
    text: str,
    name: str,
    report: ImportReport,
    progress: Callable[[int], None] | None = None,
    erased: Erased | None = None,
) -> None:
    """Append the events of an export; bad lines are reported, never fatal.
    Events of an erased user are skipped (``Erased``) and reported."""
    erased = erased if erased is not None else Erased(store)
    positions = _Positions()
    batch: list[tuple[int, NewEvent]] = []
    last = 0
    blocked: set[str] = set()  # users an erased message was met for

    def flush() -> None:
        stored: list[StoredEvent] = store.append([n for _, n in batch])
        for (old, _), ev in zip(batch, stored, strict=True):
            positions.add(old, ev.position)
            report.add("events already present" if ev.duplicate else "events restored")
        if progress is not None:
            progress(len(batch))
        batch.clear()

    for lineno, obj in json_lines(text, name, report):
        if "format" in obj and "type" not in obj:
            if obj["format"] != EXPORT_FORMAT:
                report.problem(f"{name}:{lineno}", f"unknown export format {obj['format']!r}")
            continue
        try:
            old, new = _decode(obj)
            if old <= last:
                raise InvalidInputError(f"position {old} is not after {last}: lines out of order")
        except InvalidInputError as exc:
            report.problem(f"{name}:{lineno}", str(exc))
            continue
        last = old
        if new.user_id and erased.skip(lineno, new.user_id):
            continue
        if new.user_id in blocked or (
            new.user_id and _holds_erased(erased, new.user_id, new.payload)
        ):
            # The user's events after an erased message may be derived from it
            # (memories, scenes, persona text): none of them is restored.
            blocked.add(new.user_id)
            erased.note(
                lineno,
                new.user_id,
                f"user {new.user_id!r} had messages erased that this export holds: the "
                f"capture and the user's later events are not restored; pass {FLAG} to "
                "restore them anyway",
            )
            continue
        if any(getattr(new.payload, f, 0) for f in POSITION_FIELDS):
            # It names earlier positions: everything before it must be mapped.
            if batch:
                flush()
            batch.append((old, dataclasses.replace(new, payload=_remap(new.payload, positions))))
            flush()
            continue
        batch.append((old, new))
        if len(batch) >= 500:
            flush()
    if batch:
        flush()
    erased.report_skipped(report, name, "event(s)")


def export_markdown(store: Store, user_ids: list[str]) -> str:
    """Memories by type, scenes and persona of each user, for reading."""
    out: list[str] = []
    for user in user_ids:
        out.append(f"# {user}\n")
        persona = store.get_persona(user)
        out.append("## Persona\n")
        out.append((persona or "_none yet_") + "\n")
        mems = store.list_memories(user)
        out.append(f"## Memories ({len(mems)})\n")
        for kind in ("persona", "instruction", "episodic"):
            rows = [m for m in mems if m.type == kind]
            if rows:
                out.append(f"### {kind}\n")
                for m in rows:
                    scene = f" _(scene: {m.scene_name})_" if m.scene_name else ""
                    out.append(f"- {m.content}{scene}")
                out.append("")
        scenes = store.list_scenes(user)
        out.append(f"## Scenes ({len(scenes)})\n")
        for s in scenes:
            out.append(f"### {s.name} (heat {s.heat})\n")
            if s.summary:
                out.append(f"_{s.summary}_\n")
            out.append(s.body + "\n")
    return "\n".join(out).rstrip() + "\n"


__all__ = ["export_events", "export_markdown", "restore_events"]
