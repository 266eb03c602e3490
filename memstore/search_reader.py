"""Searching an existing store without opening a ``Store``: what ``memstore
search`` runs when the store is already current.

``Store.open`` brings a database current before anything reads it: the
schema upgraded (Alembic), the projections rebuilt or caught up, the
pipeline and its scheduler (APScheduler) built. A search needs none of that
machinery when there is nothing to do, which ``is_current`` checks without
importing it: the schema at the revision the migration files ship
(``memstore.db.revision``) and every projection's checkpoint at its code
version with no event left to apply (what ``Projections.bring_current``
would find). A store that is not current is searched through a whole
``Store``, which brings it current first. Either way the search is
``memstore.user_search``'s, with the engine and embedder a ``Store``
builds from the same settings, so the hits are the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from memstore.config import Settings
from memstore.db import presence, revision
from memstore.db.engine import Database
from memstore.embeddings import make_embedder
from memstore.events.log import EventLog
from memstore.projections.base import Projections
from memstore.search.engine import SearchEngine
from memstore.store_projections import default_projections
from memstore.user_search import UserSearch


def is_current(db: Database) -> bool:
    """Nothing for ``Store.open`` to upgrade, rebuild or catch up."""
    head = revision.shipped_head()
    if head is None:
        return False
    with db.read() as conn:
        if revision.stored_revision(conn) != head:
            return False
        status = Projections(EventLog(), default_projections()).status(conn)
    return all(not s.needs_rebuild and s.pending == 0 for s in status)


class SearchReader(UserSearch):
    """``Store.search_conversations`` and ``Store.search_memories`` over a
    current database (``is_current``)."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._search_engine = SearchEngine(db, make_embedder(settings), settings)

    def close(self) -> None:
        # Vector copies still queued would open the database again (vectors.hot).
        self._search_engine.hot.close()


@contextmanager
def open_reader(db: Database, settings: Settings) -> Iterator[SearchReader | None]:
    """A reader of ``db`` while it is current, else None (open a ``Store``).
    Holds the database as an open store does: a schema change waits for the
    search, and one in progress is waited for before the check."""
    hold = presence.hold_shared(db, wait_s=settings.storage.schema_wait_s)
    try:
        if not is_current(db):
            yield None
            return
        reader = SearchReader(db, settings)
        try:
            yield reader
        finally:
            reader.close()
    finally:
        hold.release()


__all__ = ["SearchReader", "is_current", "open_reader"]
