"""``import --format jsonl``: one message per line,
``{"user", "session", "role", "content", "timestamp"?, "id"?}``.

Every line is validated on its own (ids by the same rules as the API,
roles, timestamps); consecutive good lines of one user and session are
captured together. Re-importing a file stores nothing twice: messages with
an id are known by it, others by their content-derived id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memstore.derive.messages.capture import ROLES
from memstore.errors import InvalidInputError
from memstore.porting.erased import Erased
from memstore.porting.report import ImportReport, json_lines, require_str, strict_id, when

if TYPE_CHECKING:
    from memstore.store import Store

BATCH = 200


def validate_message_line(obj: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(user, session, message) for one line, or InvalidInputError saying why not."""
    user = strict_id("user", require_str(obj, "user"))
    session = strict_id("session", require_str(obj, "session"))
    role = require_str(obj, "role") or ""
    if role.strip().lower() not in ROLES:
        raise InvalidInputError(f'"role" must be one of {sorted(ROLES)}, not {role!r}')
    content = obj.get("content")
    if not isinstance(content, str):
        raise InvalidInputError('"content" must be a string' if content is not None else
                                '"content" is missing')  # fmt: skip
    msg: dict[str, Any] = {"role": role, "content": content}
    ts = obj.get("timestamp")
    if ts is not None:
        when(ts)  # raises with a message
        msg["timestamp"] = ts
    mid = obj.get("id")
    if mid is not None:
        if not isinstance(mid, str | int) or isinstance(mid, bool):
            raise InvalidInputError('"id" must be a string')
        msg["id"] = strict_id("id", str(mid))
    if "name" in obj and isinstance(obj["name"], str):
        msg["name"] = obj["name"]
    return user, session, msg


def import_messages(
    store: Store,
    text: str,
    name: str,
    report: ImportReport,
    progress: Callable[[int], None] | None = None,
    erased: Erased | None = None,
) -> None:
    erased = erased if erased is not None else Erased(store)
    batch: list[dict[str, Any]] = []
    lines: list[int] = []
    key: tuple[str, str] | None = None

    def flush() -> None:
        nonlocal batch, lines
        if batch and key is not None:
            _capture(store, key, batch, lines, name, report)
        batch, lines = [], []

    # Lines that gave an explicit id, by (user, session, id): a later line
    # with the same id and other content would be dropped as "already known".
    ids: dict[tuple[str, str, str], tuple[int, dict[str, Any]]] = {}
    for lineno, obj in json_lines(text, name, report):
        if progress is not None:
            progress(1)
        try:
            user, session, msg = validate_message_line(obj)
        except InvalidInputError as exc:
            report.problem(f"{name}:{lineno}", str(exc))
            continue
        if erased.skip(lineno, user, session_id=session, message_id=msg.get("id")):
            continue
        if "id" in msg:
            earlier, first = ids.setdefault((user, session, msg["id"]), (lineno, msg))
            if earlier != lineno and first != msg:
                report.problem(
                    f"{name}:{lineno}",
                    f"id {msg['id']!r} is already used by line {earlier} with different content",
                )
                continue
        if (user, session) != key or len(batch) >= BATCH:
            flush()
            key = (user, session)
        batch.append(msg)
        lines.append(lineno)
    flush()
    erased.report_skipped(report, name, "line(s)")


def _capture(
    store: Store,
    key: tuple[str, str],
    batch: list[dict[str, Any]],
    lines: list[int],
    name: str,
    report: ImportReport,
) -> None:
    try:
        res = store.capture(key[0], key[1], batch)
    except InvalidInputError:
        # Validation passed line by line; find the line capture still refuses
        # rather than losing the batch.
        for msg, lineno in zip(batch, lines, strict=True):
            try:
                _count(store.capture(key[0], key[1], [msg]), report)
            except InvalidInputError as exc:
                report.problem(f"{name}:{lineno}", str(exc))
        return
    _count(res, report)


def _count(res: Any, report: ImportReport) -> None:
    report.add("messages stored", len(res.stored))
    report.add("already known", len(res.duplicates))
    if res.dropped_empty:
        report.add("empty after sanitising", res.dropped_empty)


__all__ = ["import_messages", "validate_message_line"]
