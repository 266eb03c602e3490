"""Erasing part of a user's data: messages, a session, a memory with its
sources, a time range (``Store.forget_messages`` and the others, retention).

The same machinery and proof as forgetting a user (``memstore.erasure``):
one exclusive write transaction rewrites the affected events without the
erased text (``memstore.erasure_plan`` says which), replays every projection,
moves the surviving vectors into fresh vec0 tables, drops cached embeddings
of erased texts, merges FTS5 segments, rebuilds with the offline rules the
scenes and persona that held erased text (``derive.follow.replace_lost``;
with an LLM deriver the persona is queued for it too), and appends a
content-free tombstone with the pending-compaction marker. Then the file is
vacuumed and its WAL truncated; a crash after the commit leaves the marker,
and the next open finishes (``memstore.erasure_compaction``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from memstore.db.schema import events, vector_quarantine
from memstore.derive.events import derive_stream
from memstore.derive.follow import replace_lost
from memstore.derive.queries import active_generation, memory, persona, scenes
from memstore.embeddings import content_hash
from memstore.erasure import ErasureReport, rebuild_after_delete
from memstore.erasure_compaction import at, mark_pending
from memstore.erasure_plan import Plan, Selection, lineage, plan
from memstore.errors import NotFoundError
from memstore.events.log import NewEvent, encode_payload
from memstore.kernel import Batch, Hooks, Kernel
from memstore.l0.events import ContentErased
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
    compact: bool = True,
) -> ForgetReport:
    """Erase what ``sel`` chooses of ``user_id``'s data (see the module doc).

    Unknown messages, sessions or memories raise ``NotFoundError`` and change
    nothing; a time range with nothing in it reports zeros. ``llm``: the
    store derives with an LLM (the persona is queued for it). ``compact``
    False leaves the compaction to the caller (one for many erasures; the
    marker is written all the same)."""
    pl = Plan()
    gone = 0

    def build(conn: Connection) -> Batch:
        nonlocal pl, gone
        evs = kernel.log.read(conn, user_id=user_id)
        if not evs:
            raise NotFoundError(f"user {user_id!r} has no data: nothing to erase")
        pl = plan(evs, sel)
        _check_found(conn, user_id, sel, pl)
        head = kernel.log.last_position(conn)
        gen = active_generation(conn, user_id)
        lost = {
            m
            for s in scenes(conn, user_id, gen)
            if any(a in pl.scenes for a in lineage(s["scene_id"]))
            for m in s["memory_ids"]
        }
        had_persona = persona(conn, user_id, gen) is not None
        ctx_before = context_texts(conn, user_id)
        before = {k: spaces.natural_ids(conn, k, without_user="") for k in spaces.KINDS}
        ordered = pl.delete
        for i in range(0, len(ordered), 500):
            conn.execute(events.delete().where(events.c.position.in_(ordered[i : i + 500])))
        for pos, payload in sorted(pl.rewrite.items()):
            conn.execute(
                events.update()
                .where(events.c.position == pos)
                .values(payload=encode_payload(payload), version=type(payload).VERSION)
            )
        at("rewritten")  # a kill here rolls the whole erasure back
        ctx_after: dict[tuple[str, str, str], str] = {}

        def erased_hashes(c: Connection) -> set[str]:
            ctx_after.update(context_texts(c, user_id))
            texts = pl.texts | (set(ctx_before.values()) - set(ctx_after.values()))
            return {content_hash(t) for t in texts if t}

        # A message whose previous message was erased has a context vector
        # built from erased text: it goes, and is embedded again (below).
        recontext: set[Any] = set()

        def keep(kind: str, key: Any) -> bool:
            if kind != "l0" or key not in ctx_before:
                return True
            if key not in ctx_after:
                ctx_after.update(context_texts(conn, user_id))
            if ctx_after.get(key) != ctx_before[key]:
                recontext.add(key)
                return False
            return True

        gone = rebuild_after_delete(kernel, conn, before, erased_hashes, keep=keep)
        _requeue(conn, kernel, recontext)
        follow = replace_lost(
            conn,
            user_id,
            gen,
            lost - pl.memories,
            rewrite_persona=had_persona and pl.personas > 0,
            llm=llm,
            max_scenes=kernel.settings.pipeline.max_scenes,
        )
        tombstone = ContentErased(
            erased_user_id=user_id,
            grain=sel.grain,
            events_removed=len(pl.delete),
            events_rewritten=len(pl.rewrite),
            messages_removed=len(pl.messages),
            memories_removed=len(pl.memories),
            reason=reason,
        )
        new = [NewEvent("erasure", tombstone)]
        new += [NewEvent(derive_stream(user_id), p, user_id=user_id) for p in follow]

        # The pipeline's in-transaction hook queues the LLM's persona run.
        return Batch(new, after=head, then=lambda c, st: mark_pending(c, st[0].position))

    only_txn = Hooks(in_transaction=kernel.hooks.in_transaction)
    try:
        stored = kernel.append_if(build, hooks=only_txn, exclusive=True)
    except _Nothing:
        return _report(user_id, sel, pl)
    at("committed")
    if not compact:
        return _report(
            user_id, sel, pl, position=stored[0].position, gone=gone, compacted=False,
            detail="compaction pending",
        )  # fmt: skip
    result = kernel.compactor.run(wait_s, full=vacuum_full)
    return _report(
        user_id,
        sel,
        pl,
        position=stored[0].position,
        gone=gone,
        compacted=result.done,
        detail=result.detail,
    )


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


__all__ = ["ForgetReport", "erase_part", "preview"]
