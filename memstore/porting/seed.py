"""The upstream's seed input: historical conversations in two JSON shapes.

Format A is ``{"sessions": [SESSION, ...]}``, format B is ``[SESSION, ...]``;
a SESSION is ``{"sessionKey", "sessionId"?, "conversations": [[MESSAGE, ...], ...]}``
(a list of rounds) and a MESSAGE is ``{"role", "content", "timestamp"?}`` with
the timestamp in epoch milliseconds or ISO-8601. Timestamps are all present or
all absent. Validation collects every problem with its location instead of
stopping at the first, so one run tells the user everything to fix.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memstore.derive.messages.capture import ROLES
from memstore.errors import InvalidIdError, InvalidInputError
from memstore.porting.report import when
from memstore.validate import check_id

if TYPE_CHECKING:
    from memstore.store import Store

FORMAT_HINT = (
    'expected format A {"sessions": [...]} or format B [{"sessionKey", "conversations"}, ...]'
)


@dataclass(frozen=True)
class SeedProblem:
    stage: str
    message: str
    session: int | None = None
    round: int | None = None
    message_index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stage": self.stage, "message": self.message}
        if self.session is not None:
            out["sourceIndex"] = self.session
        if self.round is not None:
            out["roundIndex"] = self.round
        if self.message_index is not None:
            out["messageIndex"] = self.message_index
        return out

    def __str__(self) -> str:
        where = []
        if self.session is not None:
            where.append(f"session[{self.session}]")
        if self.round is not None:
            where.append(f"round[{self.round}]")
        if self.message_index is not None:
            where.append(f"msg[{self.message_index}]")
        return f"{' '.join(where) + ': ' if where else ''}{self.message}"


class SeedValidationError(InvalidInputError):
    """Seed input that cannot be used; ``problems`` lists every one found."""

    def __init__(self, problems: list[SeedProblem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems[:50])
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        super().__init__(f"seed input is invalid ({len(problems)} problem(s)):\n{lines}{more}")


@dataclass
class SeedSession:
    session_key: str
    session_id: str
    rounds: list[list[dict[str, Any]]] = field(default_factory=list)
    given_id: bool = False

    @property
    def message_count(self) -> int:
        return sum(len(r) for r in self.rounds)


def parse_seed(
    raw: Any,
    *,
    fallback_session_key: str = "",
    strict_round_role: bool = False,
    auto_fill_timestamps: bool = True,
    start_ms: int = 0,
) -> list[SeedSession]:
    """Validate seed data (already JSON-decoded) and normalise it.

    Messages come back as ``{"role", "content", "timestamp"}`` with the
    timestamp in epoch ms; missing ones are filled from ``start_ms`` in steps of
    100 ms (in input order across all sessions) unless ``auto_fill_timestamps``
    is false, in which case they stay ``None`` (capture then uses the time of
    import)."""
    if isinstance(raw, dict) and "sessions" in raw:
        sessions = raw["sessions"]
        if not isinstance(sessions, list):
            raise SeedValidationError([SeedProblem("top_level", '"sessions" is not an array')])
    elif isinstance(raw, list):
        sessions = raw
    else:
        raise SeedValidationError([SeedProblem("top_level", f"unrecognised input: {FORMAT_HINT}")])
    if not sessions:
        raise SeedValidationError([SeedProblem("session", "no sessions in input")])
    problems: list[SeedProblem] = []
    out: list[SeedSession] = []
    has_ts = missing_ts = False
    for si, s in enumerate(sessions):
        if not isinstance(s, dict):
            problems.append(SeedProblem("session", "session must be an object", si))
            continue
        key = s.get("sessionKey")
        if key in (None, "") and fallback_session_key:
            key = fallback_session_key
        if not isinstance(key, str) or not key.strip():
            problems.append(
                SeedProblem("session", '"sessionKey" is required (a non-empty string)', si)
            )
        else:
            try:
                check_id("sessionKey", key)
            except InvalidIdError as exc:
                # Refused, not stripped: " s1" and "s1" are two sessions.
                problems.append(SeedProblem("session", str(exc), si))
        sid = s.get("sessionId")
        if sid is not None and not isinstance(sid, str):
            problems.append(SeedProblem("session", '"sessionId" must be a string', si))
        convs = s.get("conversations")
        if not isinstance(convs, list):
            problems.append(
                SeedProblem("session", '"conversations" must be an array of rounds', si)
            )
            continue
        session = SeedSession(
            str(key or "").strip(), str(sid or "") or uuid.uuid4().hex, given_id=bool(sid)
        )
        for ri, rnd in enumerate(convs):
            if not isinstance(rnd, list) or not rnd:
                problems.append(
                    SeedProblem("round", "a round must be a non-empty array of messages", si, ri)
                )
                continue
            roles = {m.get("role") for m in rnd if isinstance(m, dict)}
            if strict_round_role and not {"user", "assistant"} <= roles:
                problems.append(
                    SeedProblem("round", "round needs a user and an assistant message", si, ri)
                )
            msgs: list[dict[str, Any]] = []
            for mi, m in enumerate(rnd):
                msg = _message(m, si, ri, mi, problems)
                if msg is None:
                    continue
                if msg["timestamp"] is None:
                    missing_ts = True
                else:
                    has_ts = True
                msgs.append(msg)
            session.rounds.append(msgs)
        out.append(session)
    if has_ts and missing_ts:
        problems.append(
            SeedProblem(
                "timestamp_consistency",
                "some messages have timestamps and others do not: give all or none",
            )
        )
    if problems:
        raise SeedValidationError(problems)
    if missing_ts and auto_fill_timestamps:
        ts = start_ms
        for session in out:
            for rnd in session.rounds:
                for msg in rnd:
                    msg["timestamp"] = ts
                    ts += 100
    return out


def _message(
    m: Any, si: int, ri: int, mi: int, problems: list[SeedProblem]
) -> dict[str, Any] | None:
    if not isinstance(m, dict):
        problems.append(SeedProblem("message", "message must be an object", si, ri, mi))
        return None
    role, content, ts = m.get("role"), m.get("content"), m.get("timestamp")
    ok = True
    if not isinstance(role, str) or role.strip().lower() not in ROLES:
        problems.append(
            SeedProblem("message", f'"role" must be one of {sorted(ROLES)}', si, ri, mi)
        )
        ok = False
    if not isinstance(content, str) or not content.strip():
        problems.append(SeedProblem("message", '"content" must be a non-empty string', si, ri, mi))
        ok = False
    stamp: int | None = None
    if ts is not None:
        if isinstance(ts, bool) or not isinstance(ts, int | str):
            problems.append(
                SeedProblem(
                    "message", '"timestamp" must be epoch milliseconds or ISO-8601', si, ri, mi
                )
            )
            ok = False
        else:
            try:
                instant = when(ts if isinstance(ts, str) else ts / 1000.0)
                stamp = int(instant.timestamp() * 1000)
            except InvalidInputError as exc:
                problems.append(SeedProblem("message", f'"timestamp": {exc}', si, ri, mi))
                ok = False
    if not ok:
        return None
    return {"role": str(role), "content": str(content), "timestamp": stamp}


@dataclass
class SeedSummary:
    sessions_processed: int = 0
    rounds_processed: int = 0
    messages_processed: int = 0
    l0_recorded: int = 0
    already_known: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def seed_store(
    store: Store, sessions: list[SeedSession], user_id: str, *, chunk: int = 200
) -> SeedSummary:
    """Capture validated seed sessions into L0 (session = sessionKey).

    Message ids come from the session id when the input named one, else from a
    hash of the session's whole content, so seeding the same input twice stores
    nothing the second time."""
    out = SeedSummary()
    for s in sessions:
        flat = [(ri, mi, m) for ri, rnd in enumerate(s.rounds) for mi, m in enumerate(rnd)]
        digest = hashlib.sha256(
            "\x1e".join(f"{m['role']}\x1f{m['content']}" for _, _, m in flat).encode()
        ).hexdigest()[:16]
        base = f"seed:{s.session_id}" if s.given_id else f"seed:{digest}"
        msgs = [
            {
                "role": m["role"],
                "content": m["content"],
                "timestamp": m["timestamp"],
                "id": f"{base}:{ri}:{mi}",
            }
            for ri, mi, m in flat
        ]
        for start in range(0, len(msgs), chunk):
            res = store.capture(user_id, s.session_key, msgs[start : start + chunk])
            out.l0_recorded += len(res.stored)
            out.already_known += len(res.duplicates)
        out.sessions_processed += 1
        out.rounds_processed += len(s.rounds)
        out.messages_processed += len(msgs)
    return out


__all__ = [
    "SeedProblem",
    "SeedSession",
    "SeedSummary",
    "SeedValidationError",
    "parse_seed",
    "seed_store",
]
