"""Turning host messages into one ``l0.captured`` event.

Sanitising happens here, before anything is stored: injected memory blocks
are stripped (so recalled memories are never re-captured as new facts),
invalid text is cleaned, oversized messages are truncated with a marker, and
empty messages are dropped. Message ids make capture idempotent.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from memstore.db import rawexec
from memstore.db.sqlfn import in_list
from memstore.derive.messages import checked
from memstore.derive.messages.events import MessagesCaptured, l0_stream
from memstore.errors import InvalidInputError
from memstore.events.groupcommit import GroupBuild
from memstore.events.log import NewEvent, StoredEvent
from memstore.kernel import Kernel
from memstore.records import NewMessage
from memstore.text import clean_text, sanitize_message
from memstore.timeutil import from_iso, parse_when, to_iso
from memstore.validate import check_id as check_id  # re-exported: older callers import it here

ROLES = frozenset({"user", "assistant", "system", "tool", "developer"})


@dataclass(frozen=True)
class PreparedMessage:
    id: str
    role: str
    text: str
    occurred_at: str
    truncated: bool
    original_bytes: int
    name: str | None = None

    def as_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "role": self.role,
            "text": self.text,
            "occurred_at": self.occurred_at,
            "truncated": self.truncated,
            "original_bytes": self.original_bytes,
        }
        if self.name:
            out["name"] = self.name
        return out


def message_key(index: int, given: object) -> str:
    """A host's own message id, as text: ints (JavaScript hosts) become their
    digits; anything else must already be a valid id."""
    if isinstance(given, int) and not isinstance(given, bool):
        given = str(given)
    return check_id(f"message {index} id", given)


def message_id(session_id: str, call_digest: str, index: int) -> str:
    """Id for a message the host gave none: a hash of the session, the whole
    call's content (roles, texts, timestamps) and the position in the call.

    A retried call therefore gets the same ids (idempotent), while the same
    short text ("yes") in a later turn with a different reply gets new ones."""
    h = hashlib.sha256(f"{session_id}\x1f{call_digest}\x1f{index}".encode()).hexdigest()
    return f"h:{h[:32]}"


def prepare_messages(
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    now: datetime,
    max_bytes: int,
) -> list[PreparedMessage]:
    if isinstance(messages, Mapping | str | bytes | bytearray) or not isinstance(
        messages, Sequence
    ):
        raise InvalidInputError(
            "messages must be a list of {'role', 'content'} objects, "
            f"got {type(messages).__name__}"
        )
    staged: list[tuple[str, str, str, str | None, bool, int, object, str | None]] = []
    now_iso = to_iso(now)
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise InvalidInputError(f"message {i} is {type(m).__name__}, expected a mapping")
        role = str(m.get("role", "")).strip().lower()
        if role not in ROLES:
            raise InvalidInputError(
                f"message {i}: role {m.get('role')!r} is not one of {sorted(ROLES)}"
            )
        raw = m.get("content", m.get("text", ""))
        original = raw if isinstance(raw, bytes) else str(raw if raw is not None else "")
        text, truncated = sanitize_message(raw, max_bytes)
        if not text:
            continue
        ts = m.get("timestamp", m.get("occurred_at"))
        stamp = to_iso(parse_when(ts)) if ts not in (None, "") else None
        given = m.get("id")
        size = (
            len(original)
            if isinstance(original, bytes)
            else len(original.encode("utf-8", "surrogatepass"))
        )
        # OpenAI messages may name their participant; kept as the speaker.
        raw_name = m.get("name")
        name = clean_text(str(raw_name)).strip()[:128] if raw_name not in (None, "") else None
        staged.append((role, text, stamp or now_iso, stamp, truncated, size, given, name or None))
    digest = hashlib.sha256(
        "\x1e".join(f"{r}\x1f{st or ''}\x1f{t}" for r, t, _, st, *_ in staged).encode()
    ).hexdigest()
    out: list[PreparedMessage] = []
    first: dict[str, int] = {}
    for i, (role, text, occurred, _stamp, truncated, size, given, name) in enumerate(staged):
        mid = (
            message_key(i, given) if given not in (None, "") else message_id(session_id, digest, i)
        )
        msg = PreparedMessage(mid, role, text, occurred, truncated, size, name)
        # One id, two different messages: storing either would lose the
        # other without a word. The same message twice is a plain duplicate.
        j = first.setdefault(mid, len(out))
        if j != len(out) and _content(out[j]) != _content(msg):
            raise InvalidInputError(
                f"message {i} has id {mid!r}, like an earlier message of this call, "
                "with different content: give each message its own id"
            )
        out.append(msg)
    return out


def _content(m: PreparedMessage) -> tuple[object, ...]:
    return (m.role, m.text, m.occurred_at, m.name)


@dataclass(frozen=True)
class CaptureResult:
    """What a capture stored: the new message ids, and those it had already."""

    event_position: int | None
    stored: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    dropped_empty: int = 0


def known_message_ids(
    conn: Connection, user_id: str, session_id: str, ids: Sequence[str]
) -> set[str]:
    """The ids among ``ids`` this user's session already has (read in the
    capture's write transaction, so two concurrent captures cannot both store
    a message)."""
    known: set[str] = set()
    for i in range(0, len(ids), 500):
        marks, chunk = in_list(ids[i : i + 500])
        sql = _STORED_SQL.format(tag="", marks=marks)
        known |= {r[0] for r in rawexec.rows(conn, sql, (user_id, session_id, *chunk))}
    return known


# Which of some ids one session stores; ``tag`` numbers the part of a
# ``stored_ids_together`` statement the rows come from.
_STORED_SQL = (
    "SELECT {tag}message_id FROM l0_messages WHERE user_id = ? AND session_id = ? "
    "AND message_id IN ({marks})"
)


# Parameters one statement of ``stored_ids_together`` takes at most (SQLite
# allows 32,766; a batch of captures of a turn each needs about 4 per capture).
_TOGETHER_PARAMS = 2_000


def stored_ids_together(
    conn: Connection, wanted: Sequence[tuple[str, str, Sequence[str]]]
) -> dict[tuple[str, str], set[str]]:
    """``known_message_ids`` of several sessions (distinct), in as few
    statements as the parameter limit allows."""
    out: dict[tuple[str, str], set[str]] = {(u, s): set() for u, s, _ in wanted}
    parts: list[str] = []
    params: list[Any] = []
    keys: list[tuple[str, str]] = []

    def send() -> None:
        sql = " UNION ALL ".join(parts)
        for i, mid in rawexec.rows(conn, sql, params):
            out[keys[int(i)]].add(mid)
        parts.clear()
        params.clear()
        keys.clear()

    for u, s, ids in wanted:
        if not ids:
            continue
        if len(ids) > 64:  # a long call: its own statements
            out[(u, s)] = known_message_ids(conn, u, s, ids)
            continue
        marks, chunk = in_list(ids)
        if params and len(params) + 2 + len(chunk) > _TOGETHER_PARAMS:
            send()
        parts.append(_STORED_SQL.format(tag=f"{len(keys)}, ", marks=marks))
        params.extend((u, s, *chunk))
        keys.append((u, s))
    if parts:
        send()
    return out


def new_messages(prepared: Sequence[PreparedMessage], known: set[str]) -> list[PreparedMessage]:
    fresh: list[PreparedMessage] = []
    seen: set[str] = set()
    for m in prepared:
        if m.id not in known and m.id not in seen:
            seen.add(m.id)
            fresh.append(m)
    return fresh


@dataclass(frozen=True)
class CapturePlan:
    """A capture's checked messages, ready to append (``plan``): the build the
    append runs in its transaction, and what turns the appended events into
    the caller's ``CaptureResult``."""

    build: GroupBuild
    result: Callable[[list[StoredEvent]], CaptureResult]

    def commit(self, kernel: Kernel) -> CaptureResult:
        """Append and wait (``Store.capture``)."""
        return self.result(kernel.append_grouped(self.build))

    def commit_later(self, kernel: Kernel) -> Future[CaptureResult]:
        """Queue the append and return at once (``Store.submit_capture``): the
        future resolves once the messages are committed."""
        out: Future[CaptureResult] = Future()

        def done(appended: Future[list[StoredEvent]]) -> None:
            try:
                value = self.result(appended.result())
            except BaseException as e:  # the caller's error, raised where it waits
                settle: Callable[[], None] = functools.partial(out.set_exception, e)
            else:
                settle = functools.partial(out.set_result, value)
            # A caller that cancelled its wait is told nothing (committed all the same).
            with contextlib.suppress(InvalidStateError):
                settle()

        kernel.append_grouped_later(self.build).add_done_callback(done)
        return out


def plan(
    kernel: Kernel,
    user_id: str,
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    agent_id: str | None,
    max_bytes: int,
) -> CapturePlan:
    """``Store.capture`` past its argument checks: the messages sanitised and
    given ids (bad input raises here), to append as one ``l0.captured`` event
    of those this session does not have yet."""
    prepared = prepare_messages(session_id, messages, now=kernel.clock(), max_bytes=max_bytes)
    build = _CaptureBuild(kernel, user_id, session_id, agent_id, prepared)
    dropped = len(messages) - len(prepared)
    ids = build.ids

    def result(stored: list[StoredEvent]) -> CaptureResult:
        # What the last run of the build saw (it runs again, alone, when the
        # transaction it shared with other captures failed).
        known, fresh = build.known, build.fresh
        if not stored:
            return CaptureResult(None, [], ids, [], dropped)
        # A repeat within the call is a duplicate too, reported like one stored before.
        repeats = [
            i for i, n in Counter(ids).items() if n > 1 and i not in known for _ in range(n - 1)
        ]
        return CaptureResult(
            stored[0].position,
            [m.id for m in fresh],
            [i for i in ids if i in known] + repeats,
            [m.id for m in fresh if m.truncated],
            dropped,
        )

    return CapturePlan(build, result)


# The batch's scratch: per (user, session), which of its captures' ids are
# stored, read for every capture of the batch at once (``read_together``).
_STORED = "l0.stored"


class _CaptureBuild:
    """A capture's ``GroupBuild``: inside the append's transaction, the
    messages this session does not have yet, as one event. Two captures of
    the same messages cannot both see them as new; a capture committed in
    the same transaction before this one is not in l0_messages yet, so the
    ids it took are in the batch's scratch."""

    __slots__ = ("agent_id", "fresh", "ids", "kernel", "known", "prepared", "session_id", "user_id")

    def __init__(
        self,
        kernel: Kernel,
        user_id: str,
        session_id: str,
        agent_id: str | None,
        prepared: list[PreparedMessage],
    ) -> None:
        self.kernel, self.user_id, self.session_id = kernel, user_id, session_id
        self.agent_id, self.prepared = agent_id, prepared
        self.ids = [m.id for m in prepared]
        self.known: set[str] = set()
        self.fresh: list[PreparedMessage] = []

    @staticmethod
    def read_together(conn: Connection, scratch: dict[Any, Any], builds: Sequence[Any]) -> None:
        """Before any capture of a batch builds: every session's stored ids
        among its captures' in one statement, and the first reads of the
        projections and the pipeline sent ahead for them all (PostgreSQL
        answers everything with one round trip)."""
        wanted: dict[tuple[str, str], dict[str, None]] = {}
        for b in builds:
            wanted.setdefault((b.user_id, b.session_id), {}).update(dict.fromkeys(b.ids))
        builds[0].kernel.before_capture(conn, list(wanted))
        scratch[_STORED] = stored_ids_together(
            conn, [(u, s, list(ids)) for (u, s), ids in wanted.items()]
        )

    def __call__(self, conn: Connection, claimed: dict[Any, Any]) -> list[NewEvent]:
        user_id, session_id, ids = self.user_id, self.session_id, self.ids
        taken: set[str] = claimed.setdefault(("l0", user_id, session_id), set())
        together: dict[tuple[str, str], set[str]] | None = claimed.get(_STORED)
        if together is not None and (user_id, session_id) in together:
            stored = together[(user_id, session_id)].intersection(ids)
        else:  # built on its own, not through the group committer
            self.kernel.before_capture(conn, [(user_id, session_id)])
            stored = known_message_ids(conn, user_id, session_id, ids)
        known = stored | taken.intersection(ids)
        fresh = new_messages(self.prepared, known)
        taken.update(m.id for m in fresh)
        checked.note_new(conn, user_id, session_id, (m.id for m in fresh))
        self.known, self.fresh = known, fresh
        return [capture_event(user_id, session_id, self.agent_id, fresh)] if fresh else []


def turn_messages(
    user_text: str,
    assistant_text: str | None,
    *,
    timestamp: str | datetime | float | None,
    turn_id: str | None,
) -> list[NewMessage]:
    """One user/assistant exchange as messages (ids ``<turn_id>:0`` and ``:1``)."""
    msgs: list[NewMessage] = [{"role": "user", "content": user_text}]
    if assistant_text is not None:
        msgs.append({"role": "assistant", "content": assistant_text})
    for i, m in enumerate(msgs):
        if timestamp is not None:
            m["timestamp"] = timestamp
        if turn_id:
            m["id"] = f"{turn_id}:{i}"
    return msgs


def capture_event(
    user_id: str, session_id: str, agent_id: str | None, fresh: Sequence[PreparedMessage]
) -> NewEvent:
    # No idempotency key: ``capture`` appends only the messages this session
    # does not have, read in the append's own write transaction, so a retried
    # call writes nothing. The key (67 bytes and an index entry per call, ~80
    # B per message of a one-turn capture) never decided anything.
    return NewEvent(
        l0_stream(user_id, session_id),
        MessagesCaptured(
            session_id=session_id, messages=[m.as_payload() for m in fresh], agent_id=agent_id
        ),
        user_id=user_id,
        # Fixed-width UTC text (timeutil) sorts as time does: one parse, not one per message.
        occurred_at=from_iso(max(m.occurred_at for m in fresh)),
    )
