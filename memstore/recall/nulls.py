"""The similarity floor of a query: its mean closeness to everyday
sentences no question is about (English, or Chinese for a query in CJK
script), embedded once per database and cached."""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import select

from memstore.db.backend import upsert
from memstore.db.schema import embedding_cache
from memstore.embeddings import check_vectors, content_hash, from_blob, to_blob
from memstore.errors import MemstoreError
from memstore.logtext import loggable

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext
    from memstore.embeddings import Embedder

log = logging.getLogger("memstore.recall")

# Everyday sentences no question is about: the similarity floor of a query.
NULL_SENTENCES = (
    "The weather was nice today.",
    "I went to the shop and bought some bread.",
    "Thanks, that sounds great!",
    "We talked for a while and then went home.",
    "It has been a busy week at work.",
    "Let me know what you think.",
    "I watched a movie last night.",
    "See you soon!",
    "My friend called me yesterday.",
    "That is really interesting.",
    "Okay, noted.",
    "I had lunch with my family on Sunday.",
)
# The same kind of sentences in Chinese, the floor of a query written in CJK
# script: e5 puts a query nearer to texts in its own language, so against
# English sentences alone a Chinese question ("中国的首都是哪里？") stood
# above every Chinese fact of a small store by more than the gate.
NULL_SENTENCES_CJK = (
    "今天天气很好。",
    "我去商店买了一些面包。",
    "谢谢，听起来不错！",
    "我们聊了一会儿就回家了。",
    "这周工作很忙。",
    "有什么想法告诉我。",
    "我昨晚看了一部电影。",
    "回头见！",
    "我朋友昨天给我打电话了。",
    "这真有意思。",
    "好的，知道了。",
    "星期天我和家人一起吃了午饭。",
)
# Embedders whose similarities carry no meaning beyond shared words: the
# feature-hashing one. Measured on LoCoMo dev: its margin let through 39% of
# the evidence at 10% off-topic injection, word coverage 64%.
LEXICAL_EMBEDDERS = ("hashing-",)


_null_cache: weakref.WeakKeyDictionary[Embedder, dict[tuple[str, ...], np.ndarray[Any, Any]]] = (
    weakref.WeakKeyDictionary()
)
_null_lock = threading.Lock()


def null_vectors(
    store: DeriveContext, embedder: Embedder, sentences: tuple[str, ...] = NULL_SENTENCES
) -> np.ndarray[Any, Any]:
    """The null sentences' vectors: from memory, else from the database's
    embedding cache, else embedded once and written to that cache (so only
    the first recall on a database ever pays for them)."""
    with _null_lock:
        got = _null_cache.get(embedder, {}).get(sentences)
    if got is not None:
        return got
    hashes = [content_hash(t) for t in sentences]
    model = embedder.model_id
    with store.db.read() as conn:
        rows = dict(
            conn.execute(
                select(embedding_cache.c.content_hash, embedding_cache.c.vector).where(
                    embedding_cache.c.model_id == model,
                    embedding_cache.c.content_hash.in_(hashes),
                )
            ).all()
        )
    if all(h in rows for h in hashes):
        got = np.stack([from_blob(rows[h], embedder.dimensions) for h in hashes])
    else:
        got = check_vectors(embedder.embed_documents(list(sentences)), embedder.dimensions).astype(
            np.float32
        )
        try:
            with store.db.write() as conn:
                conn.execute(
                    upsert(embedding_cache).on_conflict_do_nothing(),
                    [
                        {
                            "model_id": model,
                            "content_hash": h,
                            "dims": embedder.dimensions,
                            "vector": to_blob(v),
                        }
                        for h, v in zip(hashes, got, strict=True)
                    ],
                )
        except MemstoreError as exc:  # a busy or read-only file: embed again next time
            log.info("recall: could not cache the null vectors: %s", loggable(exc))
    with _null_lock:
        _null_cache.setdefault(embedder, {})[sentences] = got
    return got


def warm_up(store: DeriveContext) -> None:
    """Embed and cache the null sentences now (``Store.reindex`` calls this)."""
    emb = store.embedder
    if emb is not None and not emb.model_id.startswith(LEXICAL_EMBEDDERS):
        try:
            null_vectors(store, emb)
            null_vectors(store, emb, NULL_SENTENCES_CJK)
        except MemstoreError as exc:  # an unreachable remote embedder: recall retries
            log.info("recall: null vectors not ready: %s", loggable(exc))
