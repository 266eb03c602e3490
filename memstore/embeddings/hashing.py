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
import threading
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
    # Word bigrams repeat across texts too (the other features have ids,
    # below, and are hashed once per id).
    digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class _Vocab:
    """Every feature other than word bigrams gets an int id the first time a
    text has it, with its hash and weight stored by id, and every word the ids
    of its own features (itself and its character n-grams).

    A text is then a list of ints, counted in C, and its hashes and weights
    are two array lookups: building feature strings, counting them and hashing
    them one at a time was most of the cost of a message (an indexer embedded
    ~1,150 chat messages a second). The vector is the same, bit for bit
    (tests/embeddings/test_hashing_fast.py holds the plain recipe as the
    oracle): the same features, counts, weights and hashes, added in the same
    order. Bigrams (a new one in most texts) are counted by string; no bigram
    comes before another feature in a text's features, so counting the two
    kinds apart keeps the order of first appearance.

    Ids are assigned under a lock and published only once their hash and
    weight are written, so a thread that sees an id finds its entry. Bounded:
    once it holds ``_MAX_FEATURES`` features or ``_MAX_WORDS`` words the next
    text starts a new vocabulary (a text uses one from start to end)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.words: dict[str, tuple[int, ...]] = {}
        self.hashes = np.empty(4096, dtype=np.uint64)
        self.weights = np.empty(4096, dtype=np.float64)
        self.full = False
        self._lock = threading.Lock()

    def feature(self, name: str, weight: float) -> int:
        got = self.ids.get(name)
        if got is not None:
            return got
        with self._lock:
            got = self.ids.get(name)
            if got is not None:
                return got
            n = len(self.ids)
            if n == len(self.hashes):
                # Grown copies first, then published: a reader holding an id
                # reads whichever array is current, and both have its entry.
                hashes = np.empty(2 * n, dtype=np.uint64)
                weights = np.empty(2 * n, dtype=np.float64)
                hashes[:n] = self.hashes
                weights[:n] = self.weights
                self.hashes, self.weights = hashes, weights
            self.hashes[n] = _hash64(name)
            self.weights[n] = weight
            self.ids[name] = n
            if n + 1 >= _MAX_FEATURES:
                self.full = True
            return n

    def word(self, word: str) -> tuple[int, ...]:
        got = self.words.get(word)
        if got is not None:
            return got
        if word in _STOPWORDS:
            ids: tuple[int, ...] = (self.feature("w:" + word, _W_STOPWORD),)
        else:
            padded = f"<{word}>"
            grams = [padded[i : i + n] for n in (3, 4) for i in range(len(padded) - n + 1)]
            ids = (
                self.feature("w:" + word, _W_WORD),
                *(self.feature("c:" + g, _W_CHARGRAM) for g in grams),
            )
        self.words[word] = ids
        if len(self.words) >= _MAX_WORDS:
            self.full = True
        return ids


# 1 + log(tf) for the counts a text usually has, computed by the math
# module as before (a feature's weight is multiplied by the same float64).
_DAMPING = np.array([1.0 + math.log(t) if t else 0.0 for t in range(1024)], dtype=np.float64)

_MAX_FEATURES = 1 << 17
_MAX_WORDS = 1 << 16
_vocab = _Vocab()


def _current_vocab() -> _Vocab:
    global _vocab
    v = _vocab
    if v.full:
        v = _vocab = _Vocab()
    return v


def _features(v: _Vocab, text: str) -> tuple[list[int], list[str]]:
    """A text's features: the ids of all but the word bigrams, and those."""
    text = unicodedata.normalize("NFKC", text).casefold()
    words: list[str] = []
    ids: list[int] = []
    for run, word in _TOKEN_RE.findall(text):
        if run:
            ids.extend(v.feature("u:" + ch, _W_CJK_UNI) for ch in run)
            ids.extend(v.feature("v:" + run[i : i + 2], _W_CJK_BI) for i in range(len(run) - 1))
            continue
        words.append(word)
        got = v.words.get(word)
        ids.extend(got if got is not None else v.word(word))
    return ids, [f"b:{a} {b}" for a, b in itertools.pairwise(words)]


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
        v = _current_vocab()
        ids, bigrams = _features(v, text)
        if not ids and not bigrams:
            out[self._buckets] = 1.0
            return
        # Per distinct feature, in order of first appearance: its hash, its
        # weight and its count (the bigrams after every other feature).
        counts = Counter(ids)
        pairs = Counter(bigrams)
        k = len(counts)
        n = k + len(pairs)
        index = np.fromiter(counts, dtype=np.intp, count=k)
        hashes = np.empty(n, dtype=np.uint64)
        value = np.empty(n, dtype=np.float64)
        tf = np.empty(n, dtype=np.int64)
        hashes[:k] = v.hashes[index]
        value[:k] = v.weights[index]
        tf[:k] = np.fromiter(counts.values(), dtype=np.int64, count=k)
        hashes[k:] = np.fromiter(map(_hash64, pairs), dtype=np.uint64, count=n - k)
        value[k:] = _W_BIGRAM
        tf[k:] = np.fromiter(pairs.values(), dtype=np.int64, count=n - k)
        repeated = np.flatnonzero(tf > 1)
        if len(repeated):  # damped: 1 + log(tf), with the math module's log
            counted = tf[repeated]
            if int(counted.max()) < len(_DAMPING):
                value[repeated] *= _DAMPING[counted]
            else:
                value[repeated] *= [1.0 + math.log(t) for t in counted.tolist()]
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
