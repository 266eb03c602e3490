"""The migrations' frozen helpers never change, and the chain is one line.

A migration must do the same thing in every future version of memstore, so
the helpers it uses are copies (migrations/frozen/) rather than live code;
their contents are pinned here. A migration that needs different behaviour
adds a new frozen module (and a pin) instead of editing one of these.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"

PINNED = {
    "__init__.py": "1d8d0d513300aa5c0f4a00f8e820cdae897e55adbefe818e7a89e31926f4d69f",
    "cjk.py": "37776fda0128b0530d41b3e7ea3aa1031bbf2c4d14903898b419b63e4525ceca",
    "ddl.py": "7c9967c348d8152ed206a19211147e4faedca1886ef5740c7e2b6f3b1363c9cc",
    "fts.py": "6a01c88343a332e98a09a99b4790d7928be889e8df1b381f1bb342b20c936346",
    "info.py": "26d318c6d566e08f4aa63b8cb7175c02fe464f97c98b329642ac44e7073573b9",
    "packing.py": "addd486ad4c2ca2b42b2e445bb235a586188127b11935bc87b9f638a1284bbd4",
    "stem.py": "9485ee6025c6ba1425e3c4f4a64c1abc5c81abafaf301711cd1ec767f191e4ac",
    "terms.py": "074cfe5b13b84eac5f17a72d82358525fc9a52c8db9531cfad3a40395dbf20fa",
}


def test_frozen_helpers_are_unchanged() -> None:
    found = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((MIGRATIONS / "frozen").glob("*.py"))
    }
    assert set(found) >= set(PINNED), "a frozen helper was removed"
    changed = sorted(n for n in PINNED if found[n] != PINNED[n])
    assert not changed, f"frozen helpers were edited (add a new module instead): {changed}"
    unpinned = sorted(set(found) - set(PINNED))
    assert not unpinned, f"pin the new frozen helpers here: {unpinned}"


def _assigned(path: Path, name: str) -> str | None:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == name:
            assert isinstance(node.value, ast.Constant)
            return node.value.value  # type: ignore[no-any-return]
    raise AssertionError(f"{path.name} assigns no {name}")


def test_the_revisions_form_one_chain_and_files_are_named_by_their_id() -> None:
    down: dict[str, str | None] = {}
    for path in sorted((MIGRATIONS / "versions").glob("*.py")):
        rev = _assigned(path, "revision")
        assert rev is not None
        # A stored revision id leads to its file (migrations/README).
        assert path.stem == rev or path.stem.startswith(f"{rev}_"), path.name
        down[rev] = _assigned(path, "down_revision")
    roots = [r for r, d in down.items() if d is None]
    assert roots == ["0001"]
    children: dict[str | None, list[str]] = {}
    for rev, parent in down.items():
        children.setdefault(parent, []).append(rev)
    branched = {p: c for p, c in children.items() if len(c) > 1}
    assert not branched, f"the chain branches: {branched}"
    # Walk from the root: every revision is reached, one after another.
    walked, node = [], "0001"
    while node is not None:
        walked.append(node)
        nxt = children.get(node, [])
        node = nxt[0] if nxt else None
    assert sorted(walked) == sorted(down)
