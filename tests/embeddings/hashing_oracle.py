"""The hashing embedder's recipe written the plain way, one feature string
at a time: the oracle memstore.embeddings.hashing must equal bit for bit
(tests/embeddings/test_hashing_fast.py). It is the module as it was before
features got ids of their own; the recipe itself (features, weights, hashes,
the order of the float32 sums) is the same."""

from __future__ import annotations

import hashlib
import itertools
import math
import unicodedata
from collections import Counter

import numpy as np

from memstore.embeddings import hashing as h


def _hash64(feature: str) -> int:
    digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _word_features(word: str) -> list[tuple[str, float]]:
    if word in h._STOPWORDS:
        return [("w:" + word, h._W_STOPWORD)]
    padded = f"<{word}>"
    spans = [(i, n) for n in (3, 4) for i in range(len(padded) - n + 1)]
    grams = [("c:" + padded[i : i + n], h._W_CHARGRAM) for i, n in spans]
    return [("w:" + word, h._W_WORD), *grams]


def features(text: str) -> list[tuple[str, float]]:
    text = unicodedata.normalize("NFKC", text).casefold()
    words: list[str] = []
    out: list[tuple[str, float]] = []
    for m in h._TOKEN_RE.finditer(text):
        run = m.group("cjk")
        if run is not None:
            out.extend(("u:" + ch, h._W_CJK_UNI) for ch in run)
            out.extend(("v:" + run[i : i + 2], h._W_CJK_BI) for i in range(len(run) - 1))
            continue
        word = m.group("word")
        words.append(word)
        out.extend(_word_features(word))
    out.extend((f"b:{a} {b}", h._W_BIGRAM) for a, b in itertools.pairwise(words))
    return out


def vector(text: str, dimensions: int = 384) -> np.ndarray:
    buckets = dimensions - 1
    out = np.zeros(dimensions, dtype=np.float32)
    feats = features(text)
    if not feats:
        out[buckets] = 1.0
        return out
    counts = Counter(f for f, _ in feats)
    weights = dict(feats)
    n = len(counts)
    hashes = np.fromiter(map(_hash64, counts), dtype=np.uint64, count=n)
    value = np.fromiter(map(weights.__getitem__, counts), dtype=np.float64, count=n)
    tf = np.fromiter(counts.values(), dtype=np.int64, count=n)
    repeated = np.flatnonzero(tf > 1)
    if len(repeated):
        value[repeated] *= [1.0 + math.log(t) for t in tf[repeated].tolist()]
    value[(hashes >> np.uint64(63)).astype(bool)] *= -1.0
    np.add.at(out, (hashes % np.uint64(buckets)).astype(np.intp), value.astype(np.float32))
    norm = float(np.linalg.norm(out))
    if norm < 1e-6:
        out[:] = 0.0
        out[buckets] = 1.0
        return out
    out /= norm
    return out
