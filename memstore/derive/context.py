"""``DeriveContext``: what derivation, recall and the pipeline are handed.

The kernel (database, log, projections, clock, settings, the one append
path) plus the read services derivation consults (search, the embedder) and
the per-store state derivation keeps between calls (the LLM client, recall's
worker slots). The ``Store`` builds one and owns it; nothing under
``derive/`` or ``pipeline/`` sees the ``Store`` itself.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from sqlalchemy import Connection

from memstore.derive.fallback import OutputHealth, output_failures
from memstore.embeddings import Embedder
from memstore.events.log import NewEvent, StoredEvent
from memstore.kernel import Kernel
from memstore.llm.backend import ChatBackend
from memstore.llm.client import LLMClient
from memstore.search import Hit, SearchEngine
from memstore.vectors.spaces import Space

# How many recall collections of one store may run at once (threads that
# overran their deadline keep a slot until they finish).
RECALL_WORKER_SLOTS = 4


class DeriveContext:
    def __init__(
        self,
        kernel: Kernel,
        search_engine: SearchEngine,
        embedder: Embedder | None,
        *,
        host_llm: ChatBackend | None = None,
    ) -> None:
        self.kernel = kernel
        # The kernel's parts under their usual names: derivation reads them often.
        self.db = kernel.db
        self.log = kernel.log
        self.settings = kernel.settings
        self.clock = kernel.clock
        self.path = kernel.path
        self.search_engine = search_engine
        self.embedder = embedder
        # The chat backend a host lends this store (``Store.use_host_llm``):
        # derivation runs on the pipeline's threads and timers, possibly long
        # after the host object that lent it is gone, but never after the store.
        self.host_llm: ChatBackend | None = host_llm
        self._llm: LLMClient | None = None
        self._llm_lock = threading.Lock()
        self.recall_slots = threading.BoundedSemaphore(RECALL_WORKER_SLOTS)
        self.output_health = OutputHealth(self.settings.llm.fallback_after, self._failures)

    def _failures(self, describe: str) -> int:
        with self.db.read() as conn:
            return output_failures(conn, describe)[0]

    def append(self, events: Sequence[NewEvent]) -> list[StoredEvent]:
        return self.kernel.append(events)

    def llm_client(self) -> LLMClient | None:
        """The LLM that derives, or None for the offline rules.

        memstore's own endpoint (``llm_base_url``/``llm_model``) wins; else the
        backend a host lent this store (``Store.use_host_llm``, e.g. Hermes' own
        model); else None. None too when ``deriver = "rules"``, or after
        ``llm_fallback_after`` answers in a row without usable JSON.
        """
        if self.settings.llm.deriver == "rules":
            return None
        client: LLMClient | None
        if self.settings.llm.configured:
            with self._llm_lock:
                if self._llm is None:
                    self._llm = LLMClient(self.settings, observer=self.output_health)
                client = self._llm
        else:
            backend = self.host_llm
            # Cheap to wrap: the backend holds the connections, the client only the retries.
            client = None if backend is None else LLMClient(backend, observer=self.output_health)
        if client is None or self.output_health.tripped(client.describe()):
            return None
        return client

    def search_memories(
        self, query: str, *, user_id: str, limit: int, conn: Connection | None = None
    ) -> list[Hit]:
        return self.search_engine.search("l1", query, user_id=user_id, limit=limit, conn=conn)

    def search_conversations(
        self, query: str, *, user_id: str, limit: int, conn: Connection | None = None
    ) -> list[Hit]:
        return self.search_engine.search("l0", query, user_id=user_id, limit=limit, conn=conn)

    def search_both(
        self,
        conn: Connection,
        query: str,
        *,
        user_id: str,
        memories: int,
        messages: int,
        found_spaces: dict[str, Space | None] | None = None,
        speaker: str | None = None,
    ) -> tuple[list[Hit], list[Hit]]:
        """``search_memories`` and ``search_conversations`` (hybrid) in
        ``conn``, both keyword lists before both vector lists
        (``SearchEngine.search_together``, which fills ``found_spaces``)."""
        mem, msg = self.search_engine.search_together(
            conn,
            [("l1", query, user_id, memories), ("l0", query, user_id, messages)],
            found_spaces,
            speaker,
        )
        return mem, msg


__all__ = ["DeriveContext"]
