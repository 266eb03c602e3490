"""Conversation-like text for benchmarks: what hosts capture, not templates.

Template sentences over a few dozen words make every index small and every
cache warm: 76-byte messages from ~80 distinct words store, rank and rebuild
faster than chat does. Real chat messages run a few hundred bytes (LoCoMo's
turns average ~120 B, assistant replies are longer), and a user's history
holds thousands of distinct words. This generator gives messages of that
shape, deterministically from a seed:

- lengths from a log-normal (a median near 215 bytes and a mean near 245
  once sentences are whole: short acknowledgements to a few long
  paragraphs), cut at 1,500;
- about half the words from ~200 common English words, the rest drawn with
  Zipf's law (s = 1.07) from a vocabulary of made-up words built from
  syllables (``vocabulary``, 8,000 by default, about what a real chat
  history of 100k messages holds), plus some numbers;
- sentences of 4 to 20 words with . ? ! and commas, capitalised.

Not a language model: the words mean nothing, so it serves speed, storage
and ranking-cost measurements, never retrieval quality.
"""

from __future__ import annotations

import itertools
import math
import random

_COMMON_TEXT = (
    "i you we they he she it the a an to and of in on at for with about from by as is are "
    "was were be been have has had do did does will would can could should may might not no "
    "yes so but or if then than that this these those there here what when where why how "
    "who which my your our their his her its me us them just really very also too still "
    "already maybe think know want need like love go going went come get got make made "
    "take took see saw say said tell told feel felt try tried work working home time day "
    "week year today tomorrow yesterday night morning last next new old good great nice "
    "bad little big lot more most some any all every one two three first again back out "
    "up down over after before because while since until into thanks okay sure right well "
    "actually probably definitely sounds fun hope glad sorry plan trip friend family "
    "weekend dinner book movie music job house car dog kids place way thing things people"
)
COMMON = tuple(_COMMON_TEXT.split())

_ONSET_TEXT = "b br c ch cl d dr f fl g gr h j k l m n p pl pr r s sh sl st t th tr v w y z"
_ONSETS = tuple(_ONSET_TEXT.split())
_VOWEL_TEXT = "a e i o u ai ea ee ie oa ou y"
_VOWELS = tuple(_VOWEL_TEXT.split())
_CODAS = ["", "", "", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ck", "ng", "rt", "x"]


def _words(n: int, rng: random.Random) -> list[str]:
    out: list[str] = []
    seen: set[str] = set(COMMON)
    while len(out) < n:
        parts = [
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
            for _ in range(rng.choice((1, 1, 2, 2, 2, 3)))
        ]
        word = "".join(parts)
        if 3 <= len(word) <= 14 and word not in seen:
            seen.add(word)
            out.append(word)
    return out


class ChatText:
    """Messages and turns of conversation-like text (module docstring)."""

    def __init__(self, seed: int = 0, vocabulary: int = 8_000) -> None:
        self.rng = random.Random(seed)
        self.vocabulary = _words(vocabulary, self.rng)
        self._cum = list(itertools.accumulate(1 / (r + 1) ** 1.07 for r in range(vocabulary)))
        self._common_cum = list(
            itertools.accumulate(1 / (r + 1) ** 0.9 for r in range(len(COMMON)))
        )

    def _length(self) -> int:
        return max(12, min(1500, int(self.rng.lognormvariate(math.log(170), 0.6))))

    def _word(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.5:
            return rng.choices(COMMON, cum_weights=self._common_cum)[0]
        if roll < 0.53:
            return str(rng.choice((rng.randint(2, 60), rng.randint(1990, 2030))))
        return rng.choices(self.vocabulary, cum_weights=self._cum)[0]

    def message(self) -> str:
        """One message of about the drawn length (a sentence is never cut)."""
        rng, target = self.rng, self._length()
        sentences: list[str] = []
        size = 0
        while size < target:
            words = [self._word() for _ in range(rng.randint(4, 20))]
            if len(words) > 8 and rng.random() < 0.4:
                words[rng.randint(2, len(words) - 3)] += ","
            end = rng.choices((".", "?", "!"), weights=(8, 2, 1))[0]
            sentence = " ".join(words)
            sentence = sentence[0].upper() + sentence[1:] + end
            sentences.append(sentence)
            size += len(sentence) + 1
        return " ".join(sentences)

    def turn(self) -> tuple[str, str]:
        """A user message and the assistant's reply."""
        return self.message(), self.message()


__all__ = ["COMMON", "ChatText"]
