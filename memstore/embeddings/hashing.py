"""A model-free embedder: signed feature hashing of words and character n-grams.

Quality is lexical only (it knows "hiking" and "hike" share letters, not that
"hiking" and "outdoors" are related), but it needs nothing installed, runs in
well under a millisecond per query and gives the same vector for the same text
on every machine and Python version, so the vector cache stays valid.

Features (after NFKC and case folding):

* Latin/other scripts: word unigrams, word bigrams, and character 3- and
  4-grams of each word padded with ``<``/``>`` (catches inflections and typos).
* CJK (Han, kana, Hangul): a run has no spaces, so its characters are used as
  1- and 2-grams instead of words. Chinese words are mostly two characters, so
  bigrams carry the meaning and unigrams give partial credit.

Each feature hashes (blake2b, never Python's salted ``hash()``) to a bucket
and a sign; the sign makes unrelated collisions cancel out on average. Counts
are damped with ``1 + log(tf)`` so a repeated word does not dominate, then the
vector is L2-normalised. Queries and documents are embedded the same way.

Text without any feature (empty, only punctuation or emoji) maps to a fixed
unit vector on the last bucket, which no feature uses: it is a valid vector
(cosine is defined), identical for all such texts and orthogonal to all others.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import ClassVar

import numpy as np

from memstore.embeddings.base import Embedder, FloatArray, check_vectors

# Bump when the features or weights change: the version is part of model_id,
# so vectors cached under the old recipe are recomputed, never mixed.
_VERSION = "v1"

_CJK_CHARS = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uac00-\ud7af"  # Hangul syllables
)
_TOKEN_RE = re.compile(rf"(?P<cjk>[{_CJK_CHARS}]+)|(?P<word>[^\W_{_CJK_CHARS}]+)")

# Function words carry almost no topic; without IDF they would make any two
# English sentences look alike. They still count, lightly, and in bigrams.
# fmt: off
_STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "do", "does", "for", "from",
    "had", "has", "have", "he", "her", "his", "i", "if", "in", "into", "is", "it", "its", "me",
    "my", "no", "not", "of", "on", "or", "our", "she", "so", "than", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "to", "was", "we", "were", "what", "when",
    "which", "who", "will", "with", "you", "your",
})
# fmt: on

_W_WORD = 1.0
_W_STOPWORD = 0.2
_W_BIGRAM = 0.7
_W_CHARGRAM = 0.25
_W_CJK_UNI = 0.5
_W_CJK_BI = 1.0


@lru_cache(maxsize=1 << 16)
def _hash64(feature: str) -> int:
    # Features repeat heavily across texts (common words, n-grams); caching the
    # digest makes long documents several times faster.
    digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@lru_cache(maxsize=1 << 16)
def _word_features(word: str) -> tuple[tuple[str, float], ...]:
    """A word's own features (itself and its character n-grams): the same
    words come back in text after text, and building the n-gram strings was
    most of the cost of a document."""
    if word in _STOPWORDS:
        return (("w:" + word, _W_STOPWORD),)
    padded = f"<{word}>"
    grams = [
        ("c:" + padded[i : i + n], _W_CHARGRAM) for n in (3, 4) for i in range(len(padded) - n + 1)
    ]
    return (("w:" + word, _W_WORD), *grams)


def _features(text: str) -> list[tuple[str, float]]:
    text = unicodedata.normalize("NFKC", text).casefold()
    words: list[str] = []
    out: list[tuple[str, float]] = []
    for m in _TOKEN_RE.finditer(text):
        run = m.group("cjk")
        if run is not None:
            out.extend(("u:" + ch, _W_CJK_UNI) for ch in run)
            out.extend(("v:" + run[i : i + 2], _W_CJK_BI) for i in range(len(run) - 1))
            continue
        word = m.group("word")
        words.append(word)
        out.extend(_word_features(word))
    out.extend((f"b:{a} {b}", _W_BIGRAM) for a, b in itertools.pairwise(words))
    return out


class HashingEmbedder(Embedder):
    """Feature-hashing embedder; see the module docstring for the recipe."""

    kind: ClassVar[str] = "hashing"

    def __init__(self, dimensions: int = 384) -> None:
        if dimensions < 16:
            # Fewer buckets than this and collisions swamp the signal.
            raise ValueError(f"HashingEmbedder needs at least 16 dimensions, got {dimensions}")
        self.dimensions = dimensions
        self.model_id = f"hashing-{_VERSION}-{dimensions}"
        self._buckets = dimensions - 1  # the last one is reserved for featureless text

    def _vector(self, text: str, out: FloatArray) -> None:
        features = _features(text)
        if not features:
            out[self._buckets] = 1.0
            return
        # Per distinct feature, in order of first appearance: its count and
        # its weight (a feature's weight never varies; its prefix says which).
        counts = Counter(f for f, _ in features)
        weights = dict(features)
        n = len(counts)
        hashes = np.fromiter(map(_hash64, counts), dtype=np.uint64, count=n)
        value = np.fromiter(map(weights.__getitem__, counts), dtype=np.float64, count=n)
        tf = np.fromiter(counts.values(), dtype=np.int64, count=n)
        repeated = np.flatnonzero(tf > 1)
        if len(repeated):  # damped: 1 + log(tf), with the math module's log
            value[repeated] *= [1.0 + math.log(t) for t in tf[repeated].tolist()]
        # Bit 63 chooses the sign; the low bits choose the bucket. They are
        # independent enough for this purpose and save a second hash.
        value[(hashes >> np.uint64(63)).astype(bool)] *= -1.0
        # add.at adds in order, in float32, one value at a time: the same sums
        # as adding each feature to its bucket in a loop, bit for bit.
        np.add.at(
            out, (hashes % np.uint64(self._buckets)).astype(np.intp), value.astype(np.float32)
        )
        norm = float(np.linalg.norm(out))
        if norm < 1e-6:
            # Signed collisions cancelled everything out (rare, tiny texts):
            # fall back to the featureless vector rather than dividing by ~0.
            out[:] = 0.0
            out[self._buckets] = 1.0
            return
        out /= norm

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of texts, not one string")
        result = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for i, text in enumerate(texts):
            self._vector(text, result[i])
        return check_vectors(result, self.dimensions, rows=len(texts), source=self.model_id)

    def embed_query(self, text: str) -> FloatArray:
        vector: FloatArray = self.embed_documents([text])[0]
        return vector


__all__ = ["HashingEmbedder"]
