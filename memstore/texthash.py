"""``content_hash``: the key of a text in the vector cache and the memory tables.

Its own module, free of numpy, so that the parts that only hash text (the
memory projection, erasure) load without the embedders.
"""

from __future__ import annotations

import hashlib


def content_hash(text: str) -> str:
    """sha256 hex of the text's UTF-8 bytes: with ``model_id`` it keys the vector cache."""
    # surrogatepass: a lone surrogate (from a broken decoder upstream) must
    # still hash, not raise; for valid text the bytes are plain UTF-8.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


__all__ = ["content_hash"]
