"""English word roots for a third FTS5 column, so inflected forms find each other.

The ``text`` column keeps exact words (unicode61) and ``cjk`` keeps bigrams;
this column holds one root per Latin word, and a query searches it with the
roots of its own words. Exact matches still score on both columns, so they
rank above matches by root alone.

Roots are Snowball English (Porter2, through PyStemmer's C build: the
pure-Python port is about 20x slower on the capture path) plus one merge
Porter2 does not make: a stem ending in ``i`` (its spelling of a final
``-y``) loses that ``i`` when at least five letters remain. Porter2 already
strips ``-ic``/``-ical``, so this joins the ``-y`` noun with its adjective:
allergy/allergies/allergic → ``allerg``, history/historic → ``histor``,
photography/photograph → ``photograph``. Shorter stems keep their ``i``
(party/part, study/stud, city/cite stay apart).
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

import Stemmer

from memstore.text.cjk import CJK_CHAR_CLASS
from memstore.text.fold import fold_diacritics

__all__ = ["stem_text", "word_root", "word_roots"]

# Words as unicode61 splits them, minus "_", digits and CJK: numbers and ids
# are matched exactly through the text column, CJK through its bigrams.
_WORD_RE = re.compile(f"[^\\W\\d_{CJK_CHAR_CLASS}]+")
_MIN_CHARS = 3  # "is", "am": no root worth indexing
# The words of _WORD_RE with at least _MIN_CHARS letters: a run of word
# letters is maximal either way, so {3,} only skips the short ones.
_LONG_WORD_RE = re.compile(f"[^\\W\\d_{CJK_CHAR_CLASS}]{{{_MIN_CHARS},}}")
_MIN_AFTER_I = 5

# A PyStemmer object is not safe to share between threads.
_local = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    s: Stemmer.Stemmer | None = getattr(_local, "stemmer", None)
    if s is None:
        s = Stemmer.Stemmer("english")
        _local.stemmer = s
    return s


@lru_cache(maxsize=65536)
def _root(folded: str) -> str:
    stem: str = _stemmer().stemWord(folded)
    if stem.endswith("i") and len(stem) > _MIN_AFTER_I:
        stem = stem[:-1]
    return stem


def word_root(word: str) -> str:
    """The root of one word (case- and diacritic-folded):
    ``word_root("Allergies") == "allerg"``, ``word_root("crème") == word_root("creme")``."""
    return _root(fold_diacritics(word).casefold())


def word_roots(words: list[str]) -> list[str]:
    """Roots of the Latin words among ``words`` (others dropped), deduplicated in order."""
    out: dict[str, None] = {}
    for w in words:
        if len(w) >= _MIN_CHARS and _WORD_RE.fullmatch(w):
            out[word_root(w)] = None
    return list(out)


# Roots by the word as written: the lookup for every word of every indexed
# text (a rebuild runs it ~20 times per message), so one dict probe rather
# than casefold plus an lru_cache call. A plain dict is safe across threads
# under the GIL; it is emptied when full rather than ordered by use.
_ROOTS: dict[str, str] = {}
_ROOTS_MAX = 200_000


def _roots_of(words: list[str]) -> list[str]:
    if len(_ROOTS) > _ROOTS_MAX:
        _ROOTS.clear()
    out = []
    for w in words:
        root = _ROOTS.get(w)
        if root is None:
            root = _ROOTS[w] = _root(w.casefold())
        out.append(root)
    return out


def stem_text(text: str) -> str:
    """The value of the root column for ``text``: one root per Latin word, in order.

    Every occurrence is kept (not deduplicated) so BM25's term frequency
    and length normalisation see the same document as the text column.
    Roots are of the words without diacritics, as :func:`word_root` gives them.
    """
    words = _LONG_WORD_RE.findall(fold_diacritics(text))
    try:
        return " ".join(map(_ROOTS.__getitem__, words))
    except KeyError:
        return " ".join(_roots_of(words))
