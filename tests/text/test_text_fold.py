"""Diacritic folding (memstore.text.fold) against FTS5's own ``remove_diacritics 2``.

Folding before FTS5 must change nothing FTS5 indexes: every letter the fold
table maps is checked here in a real FTS5 table.
"""

from __future__ import annotations

import sqlean

from memstore.recall.rank import matched_words
from memstore.recall.text import match_positions
from memstore.text import document_columns, stem_text, word_root
from memstore.text.fold import fold_diacritics
from memstore.text.fts import query_terms


def test_fold_examples() -> None:
    assert fold_diacritics("Crème Brûlée, naïve Ấn façade") == "Creme Brulee, naive An facade"
    assert fold_diacritics("cre\u0300me") == "creme"  # decomposed form
    assert fold_diacritics("Καλημέρα ø ß 咖啡") == "Καλημέρα ø ß 咖啡"  # not decomposable Latin
    assert fold_diacritics("plain ascii") == "plain ascii"


def test_columns_and_roots_are_folded() -> None:
    assert document_columns("crème 咖啡") == ("creme  ", "咖啡")
    assert stem_text("crème brûlée") == stem_text("creme brulee")
    assert word_root("Brûlée") == word_root("brulee")
    # Query terms stay as typed: each search backend folds what it needs.
    assert query_terms("crème")[0] == ["crème"]


def test_every_folded_letter_is_folded_alike_by_fts5() -> None:
    conn = sqlean.connect(":memory:")
    conn.execute(
        'CREATE VIRTUAL TABLE t USING fts5(text, tokenize="unicode61 remove_diacritics 2")'
    )
    # Every letter and mark the fold changes (the marks alone fold to "").
    letters = [chr(cp) for cp in range(0xC0, 0x1F00) if fold_diacritics(chr(cp)) != chr(cp)]
    assert len(letters) > 400
    conn.executemany(
        "INSERT INTO t(rowid, text) VALUES (?, ?)", enumerate(f"x{c}x" for c in letters)
    )
    differ = []
    for i, c in enumerate(letters):
        folded = fold_diacritics(c)
        # The folded word finds the accented one: FTS5 folds them to one token.
        hits = [
            r[0] for r in conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (f'"x{folded}x"',))
        ]
        if i not in hits:
            differ.append(c)
    conn.close()
    assert differ == []


def test_recall_matches_words_without_diacritics() -> None:
    # Recall's coverage and highlighting compare words as keyword search found them.
    assert matched_words(["creme", "brulee"], "Caroline's crème brûlée") == 2
    assert matched_words(["crème"], "plain creme") == 1
    assert match_positions("Caroline's crème brûlée", "creme") == [11]
