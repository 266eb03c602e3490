"""Imports never bring erased data back.

An erasure removes a user's events and leaves a content-free tombstone in
the log. Importing the same data again (an upstream directory, a JSONL file,
a seed, an old export) would quietly undo it, so every import asks this
module first and skips what a tombstone covers, unless the caller passes
``allow`` (CLI: ``--allow-erased``) to bring it back on purpose.

A user's erasure leaves ``erasure.user``: nothing of that user is imported.
Erasing messages, a session, a memory with its sources or a time range
leaves ``erasure.content`` with a hash of each erased message's (user,
session, id): an import of one of those messages is skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstore.derive.messages.events import ContentErased, UserErased, erased_key

if TYPE_CHECKING:
    from memstore.porting.report import ImportReport
    from memstore.store import Store

FLAG = "--allow-erased"


class Erased:
    """The erasure tombstones of one store, read once per import, and what an
    import skipped because of them."""

    def __init__(self, store: Store, *, allow: bool = False) -> None:
        self.allow = allow
        # user -> (first line skipped, lines skipped, why)
        self.skipped: dict[str, tuple[int, int, str]] = {}
        self.users: dict[str, str] = {}
        # erased_key -> when (the messages of partial erasures)
        self.messages: dict[str, str] = {}
        for ev in store.read_events(types=[UserErased.TYPE, ContentErased.TYPE]):
            if isinstance(ev.payload, UserErased):
                self.users[ev.payload.erased_user_id] = ev.recorded_at
            elif isinstance(ev.payload, ContentErased):
                for key in ev.payload.erased_keys:
                    self.messages[key] = ev.recorded_at

    def covers(
        self, user_id: str, *, session_id: str | None = None, message_id: str | None = None
    ) -> str | None:
        """Why importing this would bring erased data back (None when it would
        not, or when ``allow`` says to import it anyway)."""
        if self.allow:
            return None
        when = self.users.get(user_id)
        if when is not None:
            return (
                f"user {user_id!r} was erased at {when}: importing would bring erased data "
                f"back; pass {FLAG} to import it anyway"
            )
        if self.messages and session_id is not None and message_id is not None:
            when = self.messages.get(erased_key(user_id, session_id, message_id))
            if when is not None:
                return (
                    f"messages of user {user_id!r} were erased at {when}: importing would "
                    f"bring them back; pass {FLAG} to import them anyway"
                )
        return None

    def skip(
        self,
        lineno: int,
        user_id: str,
        *,
        session_id: str | None = None,
        message_id: str | None = None,
    ) -> bool:
        """True (and counted) when the line at ``lineno`` must be skipped."""
        why = self.covers(user_id, session_id=session_id, message_id=message_id)
        if why is None:
            return False
        self.note(lineno, user_id, why)
        return True

    def note(self, lineno: int, user_id: str, why: str) -> None:
        """Count a line skipped because of an erasure (the first reason is kept)."""
        first, n, kept = self.skipped.get(user_id, (lineno, 0, why))
        self.skipped[user_id] = (first, n + 1, kept)

    def report_skipped(self, report: ImportReport, name: str, unit: str) -> None:
        for first, n, why in self.skipped.values():
            report.problem(f"{name}:{first}", f"{why} ({n} {unit} skipped)")


__all__ = ["FLAG", "Erased"]
