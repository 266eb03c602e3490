"""When the LLM cannot produce JSON: count, fall back to the rules, say so once.

A model that never follows the schema (a small local model, a host model
without JSON output) used to fail every derivation run with ``LLMOutputError``
and be retried forever. ``OutputHealth`` counts the LLM's answers without
usable JSON in a row (each already had its corrective retry); after
``llm.fallback_after`` of them the store derives with the offline rules for
the rest of the process, and a warning is logged once. The count starts from
the log (the failed runs recorded with this same model), so a restart does not
spend another round of failures on it; a different model or endpoint starts
from zero.

``output_failures`` reads the same streak from the log for ``memstore doctor``
and ``hermes memory status``, which run in other processes.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from sqlalchemy import Connection, select

from memstore.db.schema import events as events_t

log = logging.getLogger("memstore.derive")

_RUN_FAILED = "pipeline.run_failed"
_DERIVED = ("l1.extracted", "l2.scenes_updated", "l3.persona_updated")
# Outcomes that say nothing about the LLM: the rules and imports derive without it.
_NOT_LLM = ("rules", "import")
_MARK = "LLMOutputError"
# How far back the log is read for a streak (newest derivation outcomes).
_SCAN = 200


def output_failures(conn: Connection, describe: str | None = None) -> tuple[int, str]:
    """Failed LLM runs without usable JSON in a row, newest first, and the newest
    error. With ``describe`` only failures of that backend count (its ``describe()``
    is quoted in the error); a successful LLM derivation ends the streak."""
    rows = conn.execute(
        select(events_t.c.type, events_t.c.payload)
        .where(events_t.c.type.in_([_RUN_FAILED, *_DERIVED]))
        .order_by(events_t.c.position.desc())
        .limit(_SCAN)
    ).all()
    streak, newest = 0, ""
    for row in rows:
        payload = json.loads(row.payload)
        if row.type != _RUN_FAILED:
            if str(payload.get("deriver", "")) in _NOT_LLM:
                continue
            break
        error = str(payload.get("error", ""))
        if not error.startswith(_MARK):
            break
        if describe is not None and describe not in error:
            break
        streak += 1
        newest = newest or error
    return streak, newest


def describe_failures(streak: int, newest: str, fallback_after: int) -> str | None:
    """One line for doctor and status, or None when the LLM is not failing."""
    if streak == 0:
        return None
    text = f"{streak} LLM run(s) in a row without usable JSON"
    if fallback_after > 0 and streak >= fallback_after:
        text += '; deriving with the offline rules instead (deriver = "rules" makes it final)'
    return f"{text}; newest: {newest[:200]}"


class OutputHealth:
    """The per-store streak of answers without usable JSON, for one backend."""

    def __init__(self, fallback_after: int, seed: Callable[[str], int]) -> None:
        self.fallback_after = fallback_after
        self._seed = seed
        self._lock = threading.Lock()
        self._describe: str | None = None
        self._streak = 0
        self._warned = False

    def _follow(self, describe: str) -> None:
        # Caller holds the lock. A new backend starts from what the log says of it.
        if describe != self._describe:
            self._describe = describe
            self._streak = self._seed(describe)
            self._warned = False

    def tripped(self, describe: str) -> bool:
        """Whether derivation should use the rules instead of this backend."""
        if self.fallback_after <= 0:
            return False
        with self._lock:
            self._follow(describe)
            if self._streak < self.fallback_after:
                return False
            if not self._warned:
                self._warned = True
                log.warning(
                    "memstore: %s gave no usable JSON %d times in a row; deriving with the "
                    "offline rules from now on (llm_fallback_after = %d; deriver = \"rules\" "
                    "makes it permanent)",
                    describe,
                    self._streak,
                    self.fallback_after,
                )
            return True

    def ok(self, describe: str) -> None:
        with self._lock:
            self._follow(describe)
            self._streak = 0

    def unusable(self, describe: str) -> None:
        with self._lock:
            self._follow(describe)
            self._streak += 1


__all__ = ["OutputHealth", "describe_failures", "output_failures"]
