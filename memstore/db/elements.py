"""How a vector space stores its numbers: ``float32`` or ``int8``.

Embedders return float32 unit vectors, and everything above the backend
works with float32 (the indexer's blobs, the query, recall's stored vectors).
An ``int8`` space (SQLite only: sqlite-vec's ``int8[N]`` column) stores each
vector as ``round(v * 127 / max|v|)``: one byte a dimension instead of four
(384 bytes against 1,536 for e5). The scale is per vector and not kept:
cosine, the only distance memstore ranks by, does not change when a vector
is multiplied by a positive number. Read back, a stored int8 vector is
scaled to unit length, so callers that take a dot product with a unit query
(recall's gate) get its cosine, as they do from a float32 space.

What it costs in retrieval quality was measured on LoCoMo (BENCHMARKS.md,
"Storage on captured text").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from memstore.errors import ConfigError

if TYPE_CHECKING:
    from typing import TypeAlias

    import numpy as np

    Array: TypeAlias = np.ndarray[Any, Any]

Element = Literal["float32", "int8"]
ELEMENTS: tuple[Element, ...] = ("float32", "int8")

# The SQLite backend imports this module, and the light CLI reads (users list,
# memories list) open that backend without numpy: numpy is imported per call.


def check(element: str) -> Element:
    if element == "float32":
        return "float32"
    if element == "int8":
        return "int8"
    raise ConfigError(f"unknown vector element type {element!r}; use one of {', '.join(ELEMENTS)}")


def quantize(mat: Array) -> Array:
    """int8 rows of a float matrix, each scaled so its largest |value| is 127
    (a zero row stays zero)."""
    import numpy as np

    m = np.asarray(mat, dtype=np.float32)
    if m.ndim == 1:
        m = m.reshape(1, -1)
    top = np.abs(m).max(axis=1, keepdims=True)
    top[top == 0] = 1.0
    out: Array = np.rint(m * (np.float32(127.0) / top)).astype(np.int8)
    return out


def unit_rows(mat: Array) -> Array:
    """float32 rows of unit length from int8 (or float) rows; zero rows stay
    zero (free slots of vec0's chunks)."""
    import numpy as np

    m = np.asarray(mat, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", m, m, dtype=np.float32))
    norms[norms == 0] = 1.0
    return np.asarray(m / norms[:, None], dtype=np.float32)


def encode(blob: bytes, element: str, dims: int) -> bytes:
    """The stored form of a float32 blob."""
    import numpy as np

    if element == "float32":
        return blob
    vec = np.frombuffer(blob, dtype="<f4").reshape(-1, dims)
    return quantize(vec).tobytes()


def decode(blob: bytes, element: str, dims: int) -> bytes:
    """A float32 blob of a stored vector (int8: scaled to unit length)."""
    import numpy as np

    if element == "float32":
        return blob
    return unit_rows(np.frombuffer(blob, dtype=np.int8).reshape(-1, dims)).astype("<f4").tobytes()


def matrix(raw: bytes, element: str, dims: int) -> Array:
    """float32 rows (``dims`` wide) of a buffer of stored vectors; a view of
    ``raw`` for float32, unit-length copies for int8."""
    import numpy as np

    if element == "float32":
        return np.frombuffer(raw, dtype="<f4").reshape(-1, dims)
    return unit_rows(np.frombuffer(raw, dtype=np.int8).reshape(-1, dims))
