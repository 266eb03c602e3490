"""Text embedders: local e5, model-free hashing, or any OpenAI-compatible endpoint.

Pick one with :func:`make_embedder` from :class:`memstore.config.Settings`.
Every embedder returns float32, L2-normalised vectors and is identified by a
``model_id`` that, with :func:`content_hash`, keys the vector cache. Importing
this package is cheap: the ``openai`` client is imported only when an
``OpenAIEmbedder`` is built, and the e5 model is loaded on first use.
"""

from __future__ import annotations

from memstore.embeddings.base import (
    Embedder,
    FloatArray,
    NoneEmbedder,
    check_vectors,
    content_hash,
    from_blob,
    l2_normalize,
    to_blob,
)
from memstore.embeddings.e5 import E5Embedder
from memstore.embeddings.factory import EMBEDDER_NAMES, describe_embedder, make_embedder
from memstore.embeddings.hashing import HashingEmbedder
from memstore.embeddings.openai_compat import OpenAIEmbedder

__all__ = [
    "EMBEDDER_NAMES",
    "E5Embedder",
    "Embedder",
    "FloatArray",
    "HashingEmbedder",
    "NoneEmbedder",
    "OpenAIEmbedder",
    "check_vectors",
    "content_hash",
    "describe_embedder",
    "from_blob",
    "l2_normalize",
    "make_embedder",
    "to_blob",
]
