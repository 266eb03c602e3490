"""The Store's forgetting methods at every grain (``Store`` inherits them).

``forget_memory`` retires a memory (its text leaves every read path, its
history stays in the log) or, ``with_sources=True``, erases it with the
messages it came from. The others erase: the text leaves the log and the
file (``memstore.forgetting.forget``). docs/forgetting.md says what each guarantees.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memstore import validate as v
from memstore.derive import api
from memstore.derive.context import DeriveContext
from memstore.errors import InvalidInputError
from memstore.forgetting.erasure_plan import Selection
from memstore.forgetting.forget import ForgetReport, erase_part, preview
from memstore.forgetting.retention import Policy, run_retention
from memstore.kernel import Kernel
from memstore.timeutil import parse_when, to_iso


class Forgetting:
    _kernel: Kernel
    _derivation: DeriveContext

    def _check_open(self) -> None:
        raise NotImplementedError  # Store's

    def _erase(
        self,
        user_id: str,
        sel: Selection,
        reason: str,
        wait_s: float,
        vacuum_full: bool = False,
        dry_run: bool = False,
    ) -> ForgetReport:
        user_id = v.check_id("user_id", user_id)
        if dry_run:
            return preview(self._kernel, user_id, sel)
        return erase_part(
            self._kernel,
            user_id,
            sel,
            llm=self._derivation.llm_client() is not None,
            reason=v.check_text("reason", reason),
            wait_s=v.check_seconds("wait_s", wait_s),
            vacuum_full=v.check_bool("vacuum_full", vacuum_full),
        )

    def apply_retention(
        self, *, days: float | None = None, dry_run: bool = False, wait_s: float = 10.0
    ) -> list[ForgetReport]:
        """Erase, for every user, what is past the retention limits (the
        ``retention_*`` settings; docs/forgetting.md), or with ``days``, what
        was said (or stated) more than ``days`` days ago, as
        ``forget_between``; one report per user and limit with something
        erased. ``dry_run``: only report what would go."""
        self._check_open()
        if days is None:
            policy = Policy.of(self._kernel.settings)
        elif isinstance(days, bool) or not isinstance(days, int | float) or not days >= 0:
            raise InvalidInputError(f"days must be a number of days >= 0, got {days!r}")
        else:
            policy = Policy(float(days))
        return run_retention(
            self._kernel,
            policy,
            llm=self._derivation.llm_client() is not None,
            dry_run=v.check_bool("dry_run", dry_run),
            wait_s=v.check_seconds("wait_s", wait_s),
        )

    def forget_messages(
        self,
        user_id: str,
        message_ids: Sequence[str],
        *,
        reason: str = "request",
        wait_s: float = 10.0,
        vacuum_full: bool = False,
    ) -> ForgetReport:
        """Erase messages by id (in any session of the user), the memories
        extracted from them, and the scenes and persona text built from those;
        re-derives what depended on them and compacts the file. An unknown id
        raises ``NotFoundError`` and erases nothing."""
        self._check_open()
        ids = [v.check_id("message_id", m) for m in v.check_sequence("message_ids", message_ids)]
        if not ids:
            raise InvalidInputError("message_ids must name at least one message")
        sel = Selection("messages", message_ids=frozenset(ids))
        return self._erase(user_id, sel, reason, wait_s, vacuum_full)

    def forget_session(
        self,
        user_id: str,
        session_id: str,
        *,
        reason: str = "request",
        wait_s: float = 10.0,
        vacuum_full: bool = False,
    ) -> ForgetReport:
        """Erase one session: its messages and everything derived from them,
        as ``forget_messages``."""
        self._check_open()
        sel = Selection("session", session_id=v.check_id("session_id", session_id))
        return self._erase(user_id, sel, reason, wait_s, vacuum_full)

    def forget_between(
        self,
        user_id: str,
        start: datetime | str | float | None,
        end: datetime | str | float | None,
        *,
        reason: str = "request",
        wait_s: float = 10.0,
        vacuum_full: bool = False,
        dry_run: bool = False,
    ) -> ForgetReport:
        """Erase the messages said in ``[start, end)`` (their own times; None:
        unbounded on that side), the memories stated directly in it, and
        everything derived from them, as ``forget_messages``. Nothing in the
        range reports zeros. ``dry_run``: only report what would go."""
        self._check_open()
        lo = None if start is None else to_iso(parse_when(start))
        hi = None if end is None else to_iso(parse_when(end))
        if lo is not None and hi is not None and lo >= hi:
            raise InvalidInputError(f"start {lo} must be before end {hi}")
        sel = Selection("between", start=lo, end=hi)
        return self._erase(
            user_id, sel, reason, wait_s, vacuum_full, v.check_bool("dry_run", dry_run)
        )

    def forget_memory(
        self,
        user_id: str,
        memory_id: str,
        reason: str = "user_request",
        *,
        with_sources: bool = False,
        wait_s: float = 10.0,
        vacuum_full: bool = False,
    ) -> ForgetReport | None:
        """Retire one memory on request: it, and every scene and persona text
        built from it, leave every read path at once; its history stays in the
        log. ``with_sources=True`` erases it instead, with the messages it was
        extracted from (and what else came from them), and returns the report."""
        self._check_open()
        user_id, memory_id = v.check_id("user_id", user_id), v.check_id("memory_id", memory_id)
        if v.check_bool("with_sources", with_sources):
            sel = Selection("memory", memory_ids=frozenset({memory_id}))
            return self._erase(user_id, sel, reason, wait_s, vacuum_full)
        api.forget_memory(
            self._derivation, user_id, memory_id, reason=v.check_text("reason", reason)
        )
        return None


__all__ = ["Forgetting"]
