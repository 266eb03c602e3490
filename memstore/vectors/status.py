"""``Store.embedding_status``: the embedding model and each vector space's state."""

from __future__ import annotations

from memstore.db.engine import Database
from memstore.embeddings import Embedder
from memstore.records import EmbeddingStatus
from memstore.vectors.indexer import Indexer
from memstore.vectors.quarantine import counts as quarantine_counts


def embedding_status(
    db: Database, embedder: Embedder | None, indexer: Indexer | None
) -> EmbeddingStatus:
    if indexer is None or embedder is None:
        return {"embedder": "none", "vector_search": False}
    out: EmbeddingStatus = {"model_id": embedder.model_id}
    with db.read() as conn:
        held = quarantine_counts(conn)
    for kind in ("l0", "l1"):
        sp = indexer.space(kind)
        out[kind] = {
            "dims": sp.dims,
            "ready": sp.ready,
            "pending": indexer.pending(kind),
            # Rows that could not be embedded, set aside and retried later.
            "quarantined": held.get(sp.name, 0),
        }
    return out
