"""The engines are told apart in one layer only: ``memstore.db``.

Above it, code asks its connection's backend (``memstore.db.backend.of``) or
its database's ``backend`` for whatever differs between SQLite and
PostgreSQL. This test reads the source of ``memstore/`` and ``provider/``
with ``ast`` and fails on any of these outside ``memstore/db/``:

- an attribute named ``dialect`` (``conn.dialect.name``, ``db.dialect``,
  ``engine.dialect``): a branch on the engine;
- an import from ``sqlalchemy.dialects``: engine-specific SQL constructs
  (``memstore.db.backend.upsert`` is the one both engines compile);
- a comparison (``==``, ``!=``, ``in``, ``not in``) with an engine's name as
  a string constant ("sqlite", "postgresql", "postgres").
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("memstore", "provider")
BACKEND_LAYER = ROOT / "memstore" / "db"
ENGINE_NAMES = {"sqlite", "postgresql", "postgres"}
# The cross-engine benchmark runs the engines a user names side by side
# (``memstore bench scale --backends sqlite,postgresql``): its comparisons
# are with that option's values, not with the engine of a connection. It
# may not read ``.dialect`` nor import engine constructs either.
NAMES_ALLOWED = {
    "memstore/bench/scale_db.py",
    "memstore/bench/scale_db_report.py",
    "memstore/cli/bench_scale.py",
}


def dialect_checks(source: str, filename: str, *, names_allowed: bool = False) -> list[str]:
    """Each engine branch in ``source`` as "file:line: what", in line order."""
    tree = ast.parse(source, filename=filename)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and node.attr == "dialect":
            found.append((line, ".dialect"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "sqlalchemy.dialects"
        ):
            found.append((line, f"from {node.module} import ..."))
        elif isinstance(node, ast.Import):
            found += [
                (line, f"import {a.name}")
                for a in node.names
                if a.name.startswith("sqlalchemy.dialects")
            ]
        elif isinstance(node, ast.Compare) and not names_allowed:
            ops_ok = all(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops)
            for side in [node.left, *node.comparators]:
                names = _constants(side)
                if ops_ok and names & ENGINE_NAMES:
                    found.append((line, f"compares with {sorted(names & ENGINE_NAMES)[0]!r}"))
                    break
    return [f"{filename}:{line}: {what}" for line, what in sorted(found)]


def _constants(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        }
    return set()


def scanned_files() -> list[Path]:
    return [
        p
        for top in SCANNED
        for p in sorted((ROOT / top).rglob("*.py"))
        if BACKEND_LAYER not in p.parents
    ]


def test_the_scan_finds_each_kind_of_engine_branch() -> None:
    src = (
        "from sqlalchemy.dialects.sqlite import insert\n"
        "import sqlalchemy.dialects.postgresql\n"
        "if conn.dialect.name == 'postgresql':\n    pass\n"
        "if db.kind in ('sqlite', 'x'):\n    pass\n"
        "ok = name == 'sqlite3'\n"
    )
    got = dialect_checks(src, "probe.py")
    assert [g.split(": ", 1)[0] for g in got] == [
        "probe.py:1",
        "probe.py:2",
        "probe.py:3",
        "probe.py:3",
        "probe.py:5",
    ], got
    assert [g.split(": ", 1)[0] for g in dialect_checks(src, "p.py", names_allowed=True)] == [
        "p.py:1",
        "p.py:2",
        "p.py:3",
    ]


def test_no_engine_branch_outside_the_backend_layer() -> None:
    files = scanned_files()
    assert len(files) > 100  # the walk found the packages
    found = [
        hit
        for p in files
        for hit in dialect_checks(
            p.read_text(encoding="utf-8"),
            p.relative_to(ROOT).as_posix(),
            names_allowed=p.relative_to(ROOT).as_posix() in NAMES_ALLOWED,
        )
    ]
    assert not found, "engine branches outside memstore/db (ask the backend):\n" + "\n".join(found)
