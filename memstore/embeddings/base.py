"""The embedder contract and the helpers every implementation shares.

An embedder turns text into float32, L2-normalised vectors. Vectors are a
cache keyed by ``(model_id, content_hash(text))``, so ``model_id`` must change
whenever the same text would get a different vector (other model, other
dimension, other prefixes) and must *not* change otherwise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from memstore.errors import EmbeddingError
from memstore.texthash import content_hash

FloatArray = npt.NDArray[np.float32]

# Below this a row is treated as all-zero: a zero vector has no direction, and
# sqlite-vec's cosine distance turns it into NaN instead of failing.
_MIN_NORM = 1e-12


class Embedder(ABC):
    """Text → unit vectors. Subclasses set ``kind`` and fill ``model_id``/``dimensions``.

    ``embed_documents`` and ``embed_query`` may differ (e5 prefixes the two
    sides differently); compare a query vector only with document vectors of
    the same ``model_id``. Implementations are safe to call from several
    threads.
    """

    kind: ClassVar[str] = "abstract"
    model_id: str
    dimensions: int

    @abstractmethod
    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        """Vectors for stored texts: shape ``(len(texts), dimensions)``."""

    @abstractmethod
    def embed_query(self, text: str) -> FloatArray:
        """Vector for a search query: shape ``(dimensions,)``."""

    def load(self) -> None:
        """Load the model now rather than at the first embedding. Nothing to
        do for an embedder without a local model (the default)."""
        return None

    def sparing(self, busy: Callable[[], bool]) -> AbstractContextManager[None]:
        """Inside, in this thread: whenever ``busy()`` is true as a call to
        ``embed_documents`` begins, embed on one core and leave the others to
        the process's other work. Nothing changes for an embedder that does
        not spread over cores (the default)."""
        return nullcontext()

    def resolve_dimensions(self) -> int:
        """The dimension, asking the model first if it is not known yet.

        Local embedders know it up front. A remote one configured without a
        dimension learns it from its first response; this lets a caller that
        must create a ``float[N]`` column before embedding anything find out.
        """
        return self.dimensions

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.model_id} d={self.dimensions}>"


class NoneEmbedder(Embedder):
    """Keyword-only mode: there is no vector index, and asking for one is a bug."""

    kind: ClassVar[str] = "none"

    def __init__(self) -> None:
        self.model_id = "none"
        self.dimensions = 0

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        raise EmbeddingError("keyword-only mode: no embedder is configured (embedder = 'none')")

    def embed_query(self, text: str) -> FloatArray:
        raise EmbeddingError("keyword-only mode: no embedder is configured (embedder = 'none')")


def check_vectors(
    arr: object,
    dims: int,
    *,
    rows: int | None = None,
    source: str = "embedder",
) -> FloatArray:
    """Validate an embedder's output and return it as C-contiguous float32.

    ``arr`` must be 2-D ``(rows, dims)`` with every value finite and no
    all-zero row. ``dims <= 0`` accepts any width (used while a remote
    model's dimension is still being discovered). Raises ``EmbeddingError``
    naming ``source`` and the first problem found; sqlite-vec would store NaN
    vectors silently, so this is the last line of defence.
    """
    try:
        out = np.ascontiguousarray(arr, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"{source}: output is not a numeric array ({exc})") from exc
    if out.ndim != 2:
        raise EmbeddingError(f"{source}: expected a 2-D array of vectors, got shape {out.shape}")
    if rows is not None and out.shape[0] != rows:
        raise EmbeddingError(f"{source}: expected {rows} vectors, got {out.shape[0]}")
    if dims > 0 and out.shape[1] != dims:
        raise EmbeddingError(f"{source}: dimension mismatch: expected {dims}, got {out.shape[1]}")
    if out.shape[1] == 0 and out.shape[0] > 0:
        raise EmbeddingError(f"{source}: vectors have zero dimensions")
    finite = np.isfinite(out)
    if not finite.all():
        bad_row = int(np.argwhere(~finite)[0][0])
        kind = "NaN" if np.isnan(out[bad_row]).any() else "infinite"
        raise EmbeddingError(f"{source}: vector {bad_row} contains {kind} values")
    if out.shape[0]:
        norms = np.linalg.norm(out, axis=1)
        zero = np.flatnonzero(norms < _MIN_NORM)
        if zero.size:
            raise EmbeddingError(f"{source}: vector {int(zero[0])} is all zeros")
    return out


def l2_normalize(arr: FloatArray) -> FloatArray:
    """Scale each row to unit length; rows must already be non-zero (check first)."""
    norms = np.linalg.norm(arr, axis=1, keepdims=True).astype(np.float32)
    result: FloatArray = (arr / norms).astype(np.float32, copy=False)
    return result


def to_blob(vec: npt.ArrayLike) -> bytes:
    """float32 little-endian bytes of a 1-D vector: the format sqlite-vec stores."""
    arr = np.asarray(vec, dtype="<f4")
    if arr.ndim != 1:
        raise EmbeddingError(f"to_blob: expected one vector, got shape {arr.shape}")
    return arr.tobytes()


def from_blob(blob: bytes, dims: int) -> FloatArray:
    """Inverse of ``to_blob``; checks the byte length against ``dims``."""
    if len(blob) != 4 * dims:
        raise EmbeddingError(
            f"from_blob: {len(blob)} bytes cannot hold {dims} float32 values "
            f"(expected {4 * dims}); the vector was stored with another dimension"
        )
    # Copy: frombuffer over bytes is read-only, and callers may normalise in place.
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


def embedding_text(text: str) -> str:
    """Make text safe for C and HTTP back ends: no NULs, no lone surrogates."""
    if "\x00" in text:
        text = text.replace("\x00", " ")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


__all__ = [
    "Embedder",
    "FloatArray",
    "NoneEmbedder",
    "check_vectors",
    "content_hash",
    "embedding_text",
    "from_blob",
    "l2_normalize",
    "to_blob",
]
