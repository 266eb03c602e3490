"""Pieces every derivation stage shares: run outcomes, ids, the LLM client, appends."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Connection, select

from memstore.db.schema import events as events_t
from memstore.derive.events import (
    L1Extracted,
    PersonaUpdated,
    RunFailed,
    ScenesUpdated,
    derive_stream,
)
from memstore.derive.fallback import output_failures
from memstore.derive.queries import erased_since, failures
from memstore.events.log import NewEvent, StoredEvent
from memstore.events.types import Event
from memstore.llm.client import LLMClient
from memstore.redact import redact

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

log = logging.getLogger("memstore.derive")

MAX_ERROR_CHARS = 1000


@dataclass(frozen=True)
class RunOutcome:
    """What one run did (a derivation stage, or the pipeline when the deriver
    raised). ``ok=False`` means a RunFailed event was appended and nothing that
    run covered was advanced."""

    stage: str
    ok: bool
    run_id: str
    events_appended: int = 0
    new_memories: int = 0
    persona_requested: bool = False
    error: str | None = None


def new_id() -> str:
    return uuid.uuid4().hex


def llm_client(store: DeriveContext) -> LLMClient | None:
    """The LLM that derives for ``store``, or None for the offline rules."""
    return store.llm_client()


def llm_description(store: DeriveContext) -> str:
    """One line naming the deriver ``store`` uses now (for doctor and status output)."""
    if store.settings.llm.deriver == "rules":
        return 'rules (offline rule-based deriver; forced by deriver = "rules")'
    client = llm_client(store)
    if client is None:
        if store.settings.llm.configured or store.output_health.fallback_after > 0:
            # Configured (or offered by a host) but set aside after unusable answers.
            with store.db.read() as conn:
                streak, _ = output_failures(conn)
            if streak and streak >= store.output_health.fallback_after:
                return "rules (offline rule-based deriver; the LLM gave no usable JSON)"
        return "rules (offline rule-based deriver; no LLM configured)"
    return f"{client.deriver}: {client.describe()}"


_DERIVED = {L1Extracted.TYPE: "l1", ScenesUpdated.TYPE: "l2", PersonaUpdated.TYPE: "l3"}


def last_derivation(conn: Connection) -> dict[str, str] | None:
    """The deriver and model of the newest derivation event (for doctor and status):
    what really derived, whoever ran it. None when nothing was derived yet."""
    row = conn.execute(
        select(events_t.c.type, events_t.c.payload, events_t.c.recorded_at)
        .where(events_t.c.type.in_(list(_DERIVED)))
        .order_by(events_t.c.position.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    payload = json.loads(row.payload)
    return {
        "deriver": str(payload.get("deriver", "")),
        "model": str(payload.get("model", "")),
        "stage": _DERIVED[row.type],
        "at": str(row.recorded_at),
    }


def describe_derivation(last: dict[str, str] | None) -> str:
    """``last_derivation`` as one line: "hermes, model m (l1, <recorded at>)"."""
    if last is None:
        return "none yet"
    return f"{last['deriver']}, model {last['model']} ({last['stage']}, {last['at']})"


def append_checked(
    store: DeriveContext,
    user_id: str,
    payloads: Sequence[Event],
    *,
    since: int | None = None,
    occurred_at: datetime | None = None,
    check: Callable[[Connection], bool] | None = None,
) -> list[StoredEvent] | None:
    """Append derivation events in one write transaction; inline projections apply.

    ``since`` is the log head the work started from (``Kernel.head``; None for an
    instantaneous request such as a forget). When the user was erased after
    it, nothing is appended and None is returned: the outcome was computed
    from erased content and must not bring it back. ``check`` runs next, inside
    the same transaction (e.g. "the cursor is still where this run started");
    when it returns False nothing is appended and None is returned: another
    worker did the same work meanwhile.
    """
    refused = False

    def build(conn: Connection) -> list[NewEvent]:
        nonlocal refused
        if since is not None and erased_since(conn, user_id, since):
            log.info("user %s was erased while a derivation ran: result discarded", user_id)
            refused = True
        elif check is not None and not check(conn):
            refused = True
        return (
            []
            if refused
            else [
                NewEvent(derive_stream(user_id), p, user_id=user_id, occurred_at=occurred_at)
                for p in payloads
            ]
        )

    stored = store.kernel.append_if(build)
    return None if refused else stored


def record_failure(
    store: DeriveContext,
    user_id: str,
    stage: str,
    session_id: str,
    run_id: str,
    error: BaseException,
    generation: int | None,
    *,
    since: int | None,
) -> RunOutcome:
    with store.db.read() as conn:
        attempt = failures(conn, user_id, stage, session_id) + 1
    text = redact(f"{type(error).__name__}: {error}")[:MAX_ERROR_CHARS]
    stored = append_checked(
        store,
        user_id,
        [RunFailed(stage, session_id, text, attempt, run_id, generation)],
        since=since,
    )
    return RunOutcome(stage, False, run_id, events_appended=len(stored or ()), error=text)
