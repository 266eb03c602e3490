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


# -- private names -----------------------------------------------------------------
#
# A leading underscore means "this module's own". The rule, checked on
# memstore/ and provider/:
#
# - ``from M import _x`` (or ``import`` of a ``_x`` submodule's member) where
#   M is a module of memstore or the provider: another module's private name;
# - ``expr._x`` where no code of the same module defines ``_x`` (as a
#   function, class, variable, or ``self._x`` / ``cls._x`` attribute): an
#   attribute private to some other module's class or module.
#
# Dunder names are not private. Some libraries document underscore names as
# their public API (SQLAlchemy's ``Row._mapping``, namedtuple's ``_asdict``);
# those are listed.
PUBLIC_UNDERSCORE = {"_mapping", "_asdict", "_replace", "_fields", "_make"}
# The scheduler's executor overrides APScheduler's private executor hooks;
# tests/pipeline/test_pipeline_apscheduler.py pins exactly which, against the
# installed APScheduler.
THIRD_PARTY_HOOKS = {"memstore/pipeline/scheduler.py": {"_run_job_success", "_do_submit_job"}}
OUR_PACKAGES = ("memstore", "provider")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_here(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def private_uses(source: str, filename: str) -> list[str]:
    """Each use in ``source`` of another module's private name, "file:line: what"."""
    tree = ast.parse(source, filename=filename)
    own = _defined_here(tree) | THIRD_PARTY_HOOKS.get(filename, set())
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
            node.level > 0 or (node.module or "").split(".")[0] in OUR_PACKAGES
        ):
            found += [
                (node.lineno, f"from {node.module or '.'} import {a.name}")
                for a in node.names
                if _private(a.name)
            ]
        elif (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and node.attr not in PUBLIC_UNDERSCORE
            and not (isinstance(node.ctx, ast.Store))
        ):
            imported_from = [
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom | ast.Import)
                and any((a.asname or a.name) == node.attr for a in n.names)
            ]
            if node.attr not in own or imported_from:
                found.append((node.lineno, ast.unparse(node)))
    return [f"{filename}:{line}: {what}" for line, what in sorted(found)]


def test_the_private_name_rule_on_examples() -> None:
    src = (
        "from memstore.search.bm25 import _rank, rank\n"
        "from .scenes import _fit\n"
        "from os import _exit\n"
        "class A:\n"
        "    def __init__(self):\n        self._lock = 1\n"
        "    def f(self, other):\n        return other._lock, self._x, other._y\n"
        "engine._query_blob('q')\n"
        "row._mapping\n"
        "obj.__class__\n"
    )
    got = [g.split(": ", 1)[1] for g in private_uses(src, "p.py")]
    assert got == [
        "from memstore.search.bm25 import _rank",
        "from scenes import _fit",
        "other._y",
        "self._x",
        "engine._query_blob",
    ], got


def test_no_module_uses_another_modules_private_names() -> None:
    found = [
        hit
        for p in sorted(f for top in ("memstore", "provider") for f in (ROOT / top).rglob("*.py"))
        for hit in private_uses(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix())
    ]
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_the_package_never_imports_the_test_suite() -> None:
    """Benchmarks and hosts run from an installed wheel, which has no tests/."""
    found = []
    for top in ("memstore", "provider"):
        for p in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and node.level == 0
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                found += [
                    f"{p.relative_to(ROOT)}:{node.lineno}: {n}"
                    for n in names
                    if n == "tests" or n.startswith("tests.")
                ]
    assert not found, "imports of the test suite:\n" + "\n".join(found)


# -- the Store is the only door ------------------------------------------------------
#
# Hosts call the Store's public methods, which check their arguments; they never
# reach the parts behind it. In a host module this scan fails on:
#
# - a Store internal under its private name (``store._derivation``), on any
#   receiver: no host class keeps attributes of these names;
# - ``.internals``, the accessor reserved for memstore's importers and benchmarks;
# - an internal under its former public name on anything named like a store
#   (``store.derivation``, ``self.store.db``, ``lease.store.pipeline``,
#   ``store_for().embedder``), also through ``getattr``/``setattr``/``hasattr``.
#
# ``store.settings`` is the public read-only accessor and is allowed.
HOST_PACKAGES = (
    "memstore/cli",
    "memstore/gateway",
    "memstore/mcpserver",
    "memstore/inspector",
    "provider",
)
STORE_INTERNALS = (
    "parts",
    "kernel",
    "derivation",
    "pipeline",
    "embedder",
    "search_engine",
    "indexer",
    "db",
    "settings",
    "clock",
    "log",
    "projections",
    "compactor",
)
STORE_ACCESSORS = {"settings"}


def _names_a_store(node: ast.expr) -> bool:
    text = ast.unparse(node.func if isinstance(node, ast.Call) else node)
    last = text.rsplit(".", 1)[-1].lower()
    return last.lstrip("_").startswith("store")


def store_internal_uses(source: str, filename: str) -> list[str]:
    """Each reach into a Store's parts in ``source``, "file:line: what"."""
    private = {f"_{n}" for n in STORE_INTERNALS} | {"internals"}
    former = set(STORE_INTERNALS) - STORE_ACCESSORS
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Attribute):
            receiver, attr = node.value, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            receiver, attr = node.args[0], node.args[1].value
        else:
            continue
        if attr in private or (attr in former and _names_a_store(receiver)):
            found.append((node.lineno, ast.unparse(node)))
    return [f"{filename}:{line}: {what}" for line, what in sorted(found)]


def test_the_store_door_rule_on_examples() -> None:
    src = (
        "store.derivation\n"
        "self.store.db.read()\n"
        "lease.store.pipeline\n"
        "store_for().embedder\n"
        "store._kernel.append(x)\n"
        "store.internals.search_engine\n"
        "store.settings.recall\n"
        "store.recall('q', user_id='u')\n"
        "cfg.settings.hermes\n"
        "self.db_path\n"
        "app.state.log\n"
        'getattr(getattr(store, "db", None), "location", None)\n'
        'getattr(store, "location", None)\n'
    )
    got = [g.split(": ", 1)[1] for g in store_internal_uses(src, "h.py")]
    assert got == [
        "store.derivation",
        "self.store.db",
        "lease.store.pipeline",
        "store_for().embedder",
        "store._kernel",
        "store.internals",
        "getattr(store, 'db', None)",
    ], got


def test_no_host_reaches_behind_the_store() -> None:
    found = [
        hit
        for top in HOST_PACKAGES
        for p in sorted((ROOT / top).rglob("*.py"))
        for hit in store_internal_uses(
            p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix()
        )
    ]
    assert not found, "hosts using Store internals:\n" + "\n".join(found)


def test_the_store_keeps_its_parts_private(tmp_path: Path) -> None:
    from memstore.config import Settings
    from memstore.store import Store

    settings = Settings.load().replace(background_indexer=False, scheduler=False)
    with Store.open(tmp_path / "s.db", settings=settings) as store:
        public = {n for n in STORE_INTERNALS if hasattr(store, n)}
        assert public == STORE_ACCESSORS, public
        assert all(hasattr(store, f"_{n}") for n in STORE_INTERNALS)
        # The read-only accessor hands out the frozen settings the store runs on.
        assert store.settings is store.internals.settings


# -- engine behaviour is tested on both backends --------------------------------

# A test module that opens a store runs on SQLite and on PostgreSQL
# (``pytestmark = pytest.mark.both_backends``, or a place under tests/contract/;
# see tests/backends.py), or is named here with the reason it does not.
SQLITE_ONLY_TESTS: dict[str, str] = {
    **dict.fromkeys(
        (
            "test_db_checkpoint.py",
            "test_fresh_store.py",
            "test_fts_tidy.py",
            "test_search_memories_bm25.py",
            "test_search_postings.py",
            "test_vectors_store.py",
            "test_l0_replay.py",
            "test_reliability_query_plans.py",
            "test_reliability_durability.py",
            "test_reliability_locks.py",
            "test_migrations.py",
            "test_reliability_migrations.py",
            "test_event_packing.py",
            "test_l0_keywords.py",
            "test_search_waiting.py",
            "test_prepared_statements.py",
            "test_held_readers.py",
            "test_writer_turn.py",
        ),
        "SQLite's own files, pragmas, WAL, FTS5 or sqlite-vec internals, or SQLite revisions",
    ),
    **dict.fromkeys(
        (
            "test_bench_large_user.py",
            "test_bench_recall.py",
            "test_bench_scale_db.py",
            "test_cli_first_hour.py",
            "test_cli_light_reads.py",
            "test_gateway_client.py",
            "test_gateway_startup.py",
            "test_gateway_turn_pool.py",
            "test_hermes_concurrency.py",
            "test_inspector_browser.py",
            "test_inspector_http.py",
            "test_mcp.py",
            "test_pipeline_cli.py",
            "test_import_jsonl.py",
            "test_llm_backend.py",
            "test_llm_fallback.py",
            "test_llm_faults.py",
            "test_llm_hermes.py",
            "test_log_privacy.py",
        ),
        "a host, the LLM client or a benchmark in front of the Store; the engine's side of "
        "what they drive is tested on both backends (tests/contract/test_cli_contract.py, "
        "tests/contract/test_serve_workers.py, tests/contract/test_group_commit.py and the "
        "behaviour modules)",
    ),
    "test_architecture.py": "reads the repository's source and opens no store: the store "
    "calls it names are examples for the rules it checks",
    "test_user_first.py": "the call shape of the public API (argument order, deprecation "
    "warnings); the calls' results are the behaviour modules' subject",
}

_OPENS_A_STORE = ("Store.open(", "open_store(", "store: Store")
# A module about PostgreSQL itself (how statements reach the server) runs
# there only, and says so for every test at once.
_POSTGRES_MODULE = 'pytestmark = pytest.mark.parametrize("backend", ["postgresql"]'


def _opens_a_store(source: str) -> bool:
    return any(s in source for s in _OPENS_A_STORE)


def test_every_store_test_runs_on_both_backends_or_says_why() -> None:
    tests = ROOT / "tests"
    # Test modules live in folders that mirror the package; tests/contract/
    # runs on both backends as a whole.
    modules = [p for p in tests.rglob("test_*.py") if "contract" not in p.relative_to(tests).parts]
    unmarked = sorted(
        p.name
        for p in modules
        if _opens_a_store(p.read_text(encoding="utf-8"))
        and "pytest.mark.both_backends" not in p.read_text(encoding="utf-8")
        and _POSTGRES_MODULE not in p.read_text(encoding="utf-8")
        and p.name not in SQLITE_ONLY_TESTS
    )
    assert not unmarked, (
        "these test modules open a store on SQLite only: add "
        "`pytestmark = pytest.mark.both_backends` (tests/backends.py) or name them in "
        f"SQLITE_ONLY_TESTS with the reason: {unmarked}"
    )
    names = {p.name for p in modules}
    stale = sorted(n for n in SQLITE_ONLY_TESTS if n not in names)
    assert not stale, f"SQLITE_ONLY_TESTS names modules that are gone: {stale}"


def test_the_backend_rule_on_examples() -> None:
    assert _opens_a_store("def test_x(store: Store) -> None: ...")
    assert _opens_a_store("with Store.open(path) as s: ...")
    assert not _opens_a_store("def test_parse() -> None: assert parse('x')")


# The layout shows the architecture: the four layers side by side under
# memstore/derive, and each test in the folder of the package it tests.
LAYERS = ("messages", "memories", "scenes", "persona")  # L0, L1, L2, L3
# Tests of the whole repository (architecture, imports, docs, packaging, the
# frozen migration helpers) stay at the top of tests/.
TESTS_AT_TOP = {
    "test_architecture.py",
    "test_import_graph.py",
    "test_docs.py",
    "test_packaging.py",
    "test_migrations_frozen.py",
}
# Test folders that are not named after a package under memstore/.
TEST_FOLDERS_OF_THEIR_OWN = {
    "core": "memstore's top-level modules (store, config, kernel, records ...)",
    "provider": "the Hermes provider (provider/)",
    "reliability": "the chaos suite, across every part",
    "contract": "behaviours run on each backend",
}


def memstore_packages() -> set[str]:
    return {p.parent.name for p in (ROOT / "memstore").glob("*/__init__.py")}


def test_the_four_layers_sit_side_by_side() -> None:
    derive = ROOT / "memstore" / "derive"
    assert all((derive / layer / "__init__.py").is_file() for layer in LAYERS)
    assert not (ROOT / "memstore" / "l0").exists()


def test_only_repository_wide_tests_sit_at_the_top_of_tests() -> None:
    loose = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert set(loose) <= TESTS_AT_TOP, (
        f"move these into tests/<package>/ (or add them to TESTS_AT_TOP): "
        f"{sorted(set(loose) - TESTS_AT_TOP)}"
    )


def test_test_folders_mirror_the_packages() -> None:
    allowed = memstore_packages() | set(TEST_FOLDERS_OF_THEIR_OWN)
    folders = {p.parent for p in (ROOT / "tests").rglob("test_*.py")} - {ROOT / "tests"}
    assert len(folders) > 10  # the walk found the folders
    wrong = sorted(f.relative_to(ROOT).as_posix() for f in folders
                   if f.parent != ROOT / "tests" or f.name not in allowed)  # fmt: skip
    assert not wrong, f"test folders that name no package: {wrong}"
    # Without an __init__.py two test files of one name in two folders clash.
    bare = sorted(f.name for f in folders if not (f / "__init__.py").is_file())
    assert not bare, f"test folders without __init__.py: {bare}"
