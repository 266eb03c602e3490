"""``memstore bench chaos`` runs from an installed wheel: its modules import
nothing from the repository's ``tests/`` (the fake OpenAI server its LLM-fault
step uses is the one exception left, in ``chaos_llm``)."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "memstore" / "bench"


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def test_chaos_modules_import_nothing_from_tests() -> None:
    modules = sorted(p for p in BENCH.glob("chaos*.py") if p.name != "chaos_llm.py")
    assert {p.name for p in modules} >= {"chaos.py", "chaos_kill.py", "chaos_load.py"}
    found = {p.name: [m for m in _imports(p) if m.split(".")[0] == "tests"] for p in modules}
    assert found == {p.name: [] for p in modules}


def test_the_snapshot_the_tests_use_is_the_packaged_one() -> None:
    from memstore.bench.snapshot import snapshot
    from tests.snapshot import snapshot as used_by_tests

    assert used_by_tests is snapshot
