"""Erasing part of a user's data: messages, a session, a memory with its
sources, a time range (``Store.forget_messages`` and the others, retention).

The same machinery and proof as forgetting a user (``memstore.forgetting.erasure``):
one exclusive write transaction rewrites the affected events without the
erased text (``memstore.forgetting.erasure_plan`` says which), replays every projection,
moves the surviving vectors into fresh vec0 tables, drops cached embeddings
of erased texts, merges FTS5 segments, rebuilds with the offline rules the
scenes and persona that held erased text (``derive.follow.replace_lost``;
with an LLM deriver the persona is queued for it too), and appends a
content-free tombstone with the pending-compaction marker. Then the file is
vacuumed and its WAL truncated; a crash after the commit leaves the marker,
and the next open finishes (``memstore.db.compaction``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from memstore.db.compaction import mark_pending
from memstore.db.schema import events, vector_quarantine
from memstore.derive.events import derive_stream
from memstore.derive.follow import replace_lost
from memstore.derive.messages.events import ContentErased, erased_key
from memstore.derive.queries import active_generation, memory, persona, scenes
from memstore.embeddings import content_hash
from memstore.errors import NotFoundError
from memstore.events.log import NewEvent, encode_payload
from memstore.forgetting.erasure import ErasureReport, rebuild_after_delete
from memstore.forgetting.erasure_plan import Plan, Selection, lineage, plan
from memstore.kernel import Batch, Hooks, Kernel
from memstore.timeutil import to_iso
from memstore.vectors import spaces
from memstore.vectors.indexer import context_texts


@dataclass(frozen=True)
class ForgetReport(ErasureReport):
    """What a partial erasure did (``dry_run``: what it would do; nothing
    was changed). ``compacted`` as for ``forget_user``."""

    grain: str = ""
    messages_removed: int = 0
    memories_removed: int = 0
    scenes_removed: int = 0
    personas_removed: int = 0
    events_rewritten: int = 0
    dry_run: bool = False


class _Nothing(Exception):
    """Nothing matched a time range: roll back, report zeros."""


def _check_found(conn: Connection, user_id: str, sel: Selection, pl: Plan) -> None:
    if sel.grain == "messages":
        missing = sorted(sel.message_ids - {m for _, m in pl.messages})
        if missing:
            raise NotFoundError(
                f"user {user_id!r} has no message(s) {', '.join(map(repr, missing))}: "
                "nothing erased"
            )
    elif sel.grain == "session" and pl.empty:
        raise NotFoundError(f"user {user_id!r} has no session {sel.session_id!r}: nothing erased")
    elif sel.grain == "memory":
        for mid in sel.memory_ids:
            if memory(conn, user_id, mid) is None:
                raise NotFoundError(f"user {user_id!r} has no memory {mid!r}: nothing erased")
    if pl.empty:
        raise _Nothing()


def _report(
    user_id: str, sel: Selection, pl: Plan, *, position: int = 0, gone: int = 0, **kw: Any
) -> ForgetReport:
    return ForgetReport(
        user_id,
        len(pl.delete),
        gone,
        position,
        grain=sel.grain,
        messages_removed=len(pl.messages),
        memories_removed=len(pl.memories),
        scenes_removed=len(pl.scenes),
        personas_removed=pl.personas,
        events_rewritten=len(pl.rewrite),
        **kw,
    )


def preview(kernel: Kernel, user_id: str, sel: Selection) -> ForgetReport:
    """What ``erase_part`` would remove, without changing anything."""
    with kernel.db.read() as conn:
        pl = plan(kernel.log.read(conn, user_id=user_id), sel)
        with contextlib.suppress(_Nothing):
            _check_found(conn, user_id, sel, pl)
    return _report(user_id, sel, pl, dry_run=True)


def erase_part(
    kernel: Kernel,
    user_id: str,
    sel: Selection,
    *,
    llm: bool,
    reason: str = "request",
    wait_s: float = 10.0,
    vacuum_full: bool = False,
) -> ForgetReport:
    """Erase what ``sel`` chooses of ``user_id``'s data (see the module doc).

    Unknown messages, sessions or memories raise ``NotFoundError`` and change
    nothing; a time range with nothing in it reports zeros. ``llm``: the
    store derives with an LLM (the persona is queued for it)."""
    [report] = erase_many(
        kernel, [(user_id, sel)], llm=llm, reason=reason, wait_s=wait_s, vacuum_full=vacuum_full
    )
    return report


@dataclass
class _User:
    """One user's part of an erasure, as planned before the change."""

    user_id: str
    sel: Selection
    pl: Plan
    generation: int
    lost: set[str]  # memories of the scenes that go, to place again
    had_persona: bool
    ctx_before: dict[tuple[str, str, str], str]


def _prepare(conn: Connection, kernel: Kernel, user_id: str, sel: Selection) -> _User:
    evs = kernel.log.read(conn, user_id=user_id)
    if not evs:
        raise NotFoundError(f"user {user_id!r} has no data: nothing to erase")
    pl = plan(evs, sel)
    _check_found(conn, user_id, sel, pl)
    gen = active_generation(conn, user_id)
    lost = {
        m
        for s in scenes(conn, user_id, gen)
        if any(a in pl.scenes for a in lineage(s["scene_id"]))
        for m in s["memory_ids"]
    }
    had = persona(conn, user_id, gen) is not None
    return _User(user_id, sel, pl, gen, lost, had, context_texts(conn, user_id))


def _apply(conn: Connection, pl: Plan) -> None:
    ordered = pl.delete
    for i in range(0, len(ordered), 500):
        conn.execute(events.delete().where(events.c.position.in_(ordered[i : i + 500])))
    for pos, payload in sorted(pl.rewrite.items()):
        conn.execute(
            events.update()
            .where(events.c.position == pos)
            .values(payload=encode_payload(payload), version=type(payload).VERSION)
        )


def erase_many(
    kernel: Kernel,
    wanted: Sequence[tuple[str, Selection]],
    *,
    llm: bool,
    reason: str = "request",
    wait_s: float = 10.0,
    vacuum_full: bool = False,
) -> list[ForgetReport]:
    """``erase_part`` for several users in one transaction, one replay of the
    projections and one compaction (retention); one report per user, in
    order. A time range with nothing in it for a user reports zeros."""
    users: list[_User] = []
    gone = 0

    def build(conn: Connection) -> Batch:
        nonlocal users, gone
        users = []
        for user_id, sel in wanted:
            with contextlib.suppress(_Nothing):
                users.append(_prepare(conn, kernel, user_id, sel))
        if not users:
            raise _Nothing()
        head = kernel.log.last_position(conn)
        before = {k: spaces.natural_ids(conn, k, without_user="") for k in spaces.KINDS}
        for u in users:
            _apply(conn, u.pl)
        ctx_after: dict[str, dict[tuple[str, str, str], str]] = {}

        def after(c: Connection, user_id: str) -> dict[tuple[str, str, str], str]:
            if user_id not in ctx_after:
                ctx_after[user_id] = context_texts(c, user_id)
            return ctx_after[user_id]

        def erased_hashes(c: Connection) -> set[str]:
            texts: set[str] = set()
            for u in users:
                texts |= u.pl.texts | (
                    set(u.ctx_before.values()) - set(after(c, u.user_id).values())
                )
            return {content_hash(t) for t in texts if t}

        # A message whose previous message was erased has a context vector
        # built from erased text: it goes, and is embedded again (below).
        recontext: set[Any] = set()
        by_user = {u.user_id: u for u in users}

        def keep(kind: str, key: Any) -> bool:
            u = by_user.get(key[0]) if kind == "l0" else None
            if u is None or key not in u.ctx_before:
                return True
            if after(conn, u.user_id).get(key) != u.ctx_before[key]:
                recontext.add(key)
                return False
            return True

        gone = rebuild_after_delete(kernel, conn, before, erased_hashes, keep=keep)
        _requeue(conn, kernel, recontext)
        new: list[NewEvent] = []
        for u in users:
            tombstone = ContentErased(
                erased_user_id=u.user_id,
                grain=u.sel.grain,
                events_removed=len(u.pl.delete),
                events_rewritten=len(u.pl.rewrite),
                messages_removed=len(u.pl.messages),
                memories_removed=len(u.pl.memories),
                reason=reason,
                erased_keys=sorted(erased_key(u.user_id, sm, m) for sm, m in u.pl.messages),
            )
            follow = replace_lost(
                conn,
                u.user_id,
                u.generation,
                u.lost - u.pl.memories,
                rewrite_persona=u.had_persona and u.pl.personas > 0,
                llm=llm,
                max_scenes=kernel.settings.pipeline.max_scenes,
            )
            new.append(NewEvent("erasure", tombstone))
            new += [NewEvent(derive_stream(u.user_id), p, user_id=u.user_id) for p in follow]
        # The pipeline's in-transaction hook queues the LLM's persona run.
        return Batch(new, after=head, then=lambda c, st: mark_pending(c, st[0].position))

    only_txn = Hooks(in_transaction=kernel.hooks.in_transaction)
    try:
        stored = kernel.append_if(build, hooks=only_txn, exclusive=True)
    except _Nothing:
        return [_report(user_id, sel, Plan()) for user_id, sel in wanted]
    result = kernel.compactor.run(wait_s, full=vacuum_full)
    tombs = {
        e.payload.erased_user_id: e.position for e in stored if isinstance(e.payload, ContentErased)
    }
    done = {u.user_id: u for u in users}
    return [
        _report(user_id, sel, done[user_id].pl, position=tombs[user_id], gone=gone,
                compacted=result.done, detail=result.detail)
        if user_id in done
        else _report(user_id, sel, Plan())
        for user_id, sel in wanted
    ]  # fmt: skip


def _requeue(conn: Connection, kernel: Kernel, keys: set[Any]) -> None:
    """Queue messages whose context vector was dropped for embedding again
    (the indexer's retry of quarantined rows picks them up)."""
    if not keys:
        return
    ids = spaces.natural_ids(conn, "l0", without_user="")
    now = to_iso(kernel.clock())
    for sp in spaces.list_spaces(conn):
        if sp.kind != "l0":
            continue
        conn.execute(
            vector_quarantine.insert(),
            [
                {
                    "space": sp.name,
                    "source_id": ids[k],
                    "user_id": k[0],
                    "content_hash": "",
                    "error": "context changed by an erasure: embed again",
                    "attempts": 0,
                    "first_failed_at": now,
                    "retry_after": now,
                }
                for k in sorted(keys)
                if k in ids
            ],
        )


__all__ = ["ForgetReport", "erase_many", "erase_part", "preview"]
