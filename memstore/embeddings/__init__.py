"""Text embedders: local e5, model-free hashing, or any OpenAI-compatible endpoint.

Pick one with :func:`make_embedder` from :class:`memstore.config.Settings`.
Every embedder returns float32, L2-normalised vectors and is identified by a
``model_id`` that, with :func:`content_hash`, keys the vector cache. The
OpenAI client is imported only when that embedder is built, and the e5 model
is loaded only on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from memstore.embeddings.openai_compat import OpenAIEmbedder


def __getattr__(name: str) -> Any:
    # OpenAIEmbedder's module is cheap, but keeping it out of the eager imports
    # documents that nothing here depends on the openai package at import time.
    if name == "OpenAIEmbedder":
        from memstore.embeddings.openai_compat import OpenAIEmbedder

        return OpenAIEmbedder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
