"""memstore's parts depend downward only: no import cycle, counting every import.

The graph spans the three source trees that ship together: ``memstore/``,
``migrations/`` (installed as ``memstore._migrations``) and ``provider/``
(installed as ``memstore.hermes_provider``); an import of either installed
name is an edge to the folder's module.

The graph is read from the source with ``ast``, so it sees what a runtime
check cannot: imports under ``if TYPE_CHECKING:`` and imports inside
functions (both hide a cycle from Python, not from a reader). Two graphs are
checked: between modules, and between the top-level parts (``store``,
``kernel``, ``derive``, ``pipeline``, ``search``, ``vectors``, ``forgetting`` ...).
The package's own ``__init__`` (the lazy public facade) is left out of the
part graph: it re-exports from every part by design.

The last rule keeps the hosts at the edge: no module of the core imports the
Hermes provider or hermes-agent, or names the upstream's ``TDAI_*`` variables.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "memstore"
# Each tree by the package name it is installed as (pyproject.toml).
TREES = {
    "memstore": REPO / "memstore",
    "memstore._migrations": REPO / "migrations",
    "memstore.hermes_provider": REPO / "provider",
}


def module_name(path: Path) -> str:
    for package, folder in sorted(TREES.items(), key=lambda t: -len(t[0])):
        if folder == path.parent or folder in path.parents:
            parts = [*package.split("."), *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts)
    raise ValueError(f"{path} is in none of the scanned trees")


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for folder in TREES.values() for p in sorted(folder.rglob("*.py"))}


def _resolve_from(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Every memstore module ``module`` imports, wherever the import statement is."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            target = _resolve_from(module, is_pkg, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                # ``from pkg import mod`` imports the submodule, not only pkg.
                out.add(sub if sub in known else target)
    return {m for m in out if m in known and m != module}


@functools.cache
def module_graph() -> dict[str, set[str]]:
    # Parsed once per process: every test below reads the same tree.
    mods = all_modules()
    known = set(mods)
    return {m: imports_of(m, p, known) for m, p in mods.items()}


# Packages that are parts of their own although they sit inside another part's
# folder. L0 (``derive/messages``) sits beside L1-L3 so that the four layers are
# read side by side, but it is below search and vectors, which L1-L3 use: it
# must import none of them, nor the rest of ``derive``.
OWN_PARTS = ("derive.messages",)


def part_of(module: str) -> str | None:
    bits = module.split(".")
    for own in OWN_PARTS:
        if bits[1 : 1 + own.count(".") + 1] == own.split("."):
            return own
    return bits[1] if len(bits) > 1 else None


def part_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    parts: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        src = part_of(mod)
        if src is None:
            continue
        edges = parts.setdefault(src, set())
        for dep in deps:
            dst = part_of(dep)
            if dst is not None and dst != src:
                edges.add(dst)
    return parts


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan),
    each as a sorted list: every one of them is at least one cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:
        nonlocal counter
        # Iterative: the module graph is deep enough to worry the recursion limit.
        work: list[tuple[str, Iterable[str]]] = []

        def enter(node: str) -> None:
            nonlocal counter
            index[node] = low[node] = counter
            counter += 1
            stack.append(node)
            on_stack.add(node)
            work.append((node, iter(sorted(graph.get(node, ())))))

        enter(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    enter(child)
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A concrete cycle inside ``component``, for a readable failure message."""
    members = set(component)
    start = component[0]
    path = [start]
    seen = {start}
    node = start
    while True:
        nxt = sorted(d for d in graph.get(node, ()) if d in members)
        if start in nxt and len(path) > 1:
            return [*path, start]
        fresh = [d for d in nxt if d not in seen]
        if not fresh:
            back = nxt[0]
            return [*path[path.index(back) :], back] if back in path else path
        node = fresh[0]
        seen.add(node)
        path.append(node)


def test_the_graph_sees_type_only_and_function_level_imports(tmp_path: Path) -> None:
    # The reader must see the imports Python defers; otherwise the test
    # below could pass over a cycle it never saw.
    src = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from memstore.b import X\n"
        "def f():\n    from memstore import c\n    import memstore.d\n"
        "from . import e\n"
    )
    known = {"memstore.a", "memstore.b", "memstore.c", "memstore.d", "memstore.e"}
    probe = tmp_path / "a.py"
    probe.write_text(src, encoding="utf-8")
    got = imports_of("memstore.a", probe, known)
    assert got == {"memstore.b", "memstore.c", "memstore.d", "memstore.e"}
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_spans_memstore_migrations_and_provider() -> None:
    graph = module_graph()
    assert "memstore._migrations.versions.0019_storage" in graph
    assert "memstore.hermes_provider" in graph
    # The installed names resolve to the folders' modules.
    assert (
        "memstore._migrations.frozen.packing" in graph["memstore._migrations.versions.0019_storage"]
    )


def test_migrations_import_only_frozen_code_and_errors() -> None:
    """A migration does the same forever: it may use its frozen helpers
    (memstore._migrations.frozen) and the error classes, nothing else of
    memstore's that later versions change."""
    graph = module_graph()
    allowed = ("memstore._migrations.frozen", "memstore.errors")
    bad = {
        mod: sorted(d for d in deps if not d.startswith(allowed))
        for mod, deps in graph.items()
        if mod.startswith(("memstore._migrations.versions", "memstore._migrations.frozen"))
    }
    bad = {m: d for m, d in bad.items() if d}
    assert not bad, f"migrations importing live code: {bad}"


def test_no_import_cycle_between_modules() -> None:
    graph = module_graph()
    assert len(graph) > 50  # the walk found the package
    cycles = [one_cycle(graph, c) for c in find_cycles(graph)]
    assert not cycles, "import cycles between memstore modules:\n" + "\n".join(
        " -> ".join(c) for c in cycles
    )


@pytest.mark.parametrize("part", ["store", "derive", "pipeline", "forgetting", "search", "vectors"])
def test_core_parts_exist(part: str) -> None:
    assert part in part_graph(module_graph())


@pytest.mark.parametrize("part", OWN_PARTS)
def test_own_parts_exist(part: str) -> None:
    assert part in part_graph(module_graph()), f"memstore.{part} is gone: update OWN_PARTS"


def test_l0_imports_no_other_layer() -> None:
    """L0 stands below everything that reads it (search, vectors, L1-L3)."""
    graph = part_graph(module_graph())
    above = {"derive", "search", "vectors", "recall", "pipeline", "forgetting"}
    assert not graph["derive.messages"] & above, sorted(graph["derive.messages"] & above)


def test_no_import_cycle_between_parts() -> None:
    graph = part_graph(module_graph())
    cycles = [one_cycle(graph, c) for c in find_cycles(graph)]
    assert not cycles, "import cycles between memstore's parts:\n" + "\n".join(
        " -> ".join(c) for c in cycles
    )


# -- hosts at the edge -----------------------------------------------------------------
#
# Everything that knows Hermes is in provider/ (installed as
# memstore.hermes_provider); the upstream's TDAI_* names are read by the code
# that speaks the upstream's language. In memstore/ this scan fails on:
#
# - an import of the provider, of hermes-agent (``agent``, ``hermes_*``,
#   ``plugins``, ``tools``, ``run_agent``, Hermes' top-level ``gateway``) by ``import``,
#   ``from`` or ``importlib.import_module("...")``, or a module name of the
#   provider in a string (a lazy reference);
# - the text ``TDAI_`` outside the gateway and porting code;
# - ``HermesSettings`` anywhere (the provider's section is provider/settings.py).
#
# The edge may refer to the hosts: the CLI's lazy command table names the
# provider's command module, and the benchmarks drive Hermes itself.
HOST_EDGE = {"memstore/cli/commands.py"}
HOST_EDGE_FOLDERS = ("memstore/bench/",)
UPSTREAM_FOLDERS = ("memstore/gateway/", "memstore/porting/")
# The gateway's command: its help names the upstream's TDAI_GATEWAY_API_KEY.
UPSTREAM_MODULES = {"memstore/cli/serve.py"}
# hermes-agent's top-level packages and modules ("hermes_": hermes_cli,
# hermes_constants, ...), and the provider.
HERMES_MODULES = (
    "agent",
    "gateway",
    "hermes_",
    "plugins",
    "run_agent",
    "tools",
    "memstore.hermes_provider",
)


def _hermes_module(name: str) -> bool:
    return any(
        name == m or name.startswith(m if m.endswith("_") else m + ".") for m in HERMES_MODULES
    )


def host_references(source: str, filename: str) -> list[str]:
    """Each place in a core module that knows a host, "file:line: what"."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("memstore.hermes_provider"):
                names = [node.value]
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names = [str(node.args[0].value)]
        found += [(getattr(node, "lineno", 0), f"imports {n}") for n in names if _hermes_module(n)]
    for number, line in enumerate(source.splitlines(), 1):
        if "TDAI_" in line:
            found.append((number, "names TDAI_"))
        if "HermesSettings" in line:
            found.append((number, "names HermesSettings"))
    return [f"{filename}:{line}: {what}" for line, what in sorted(set(found))]


def test_the_host_rule_on_examples() -> None:
    src = (
        "import agent.memory_provider\n"
        "from hermes_constants import x\n"
        "from memstore.hermes_provider.home import edit_config\n"
        "mod = importlib.import_module('memstore.hermes_provider')\n"
        "LAZY = ('memstore.hermes_provider.cli',)\n"
        "v = os.environ.get('TDAI_LLM_MODEL')\n"
        "from memstore.config import Settings\n"
        "import agentic\nfrom memstore.gateway import app\n"
        "hermes = Settings().host_section('hermes')\n"
    )
    got = [g.split(": ", 1)[1] for g in host_references(src, "m.py")]
    assert got == [
        "imports agent.memory_provider",
        "imports hermes_constants",
        "imports memstore.hermes_provider.home",
        "imports memstore.hermes_provider",
        "imports memstore.hermes_provider.cli",
        "names TDAI_",
    ], got


def test_the_core_knows_no_host() -> None:
    found = []
    for p in sorted(ROOT.rglob("*.py")):
        name = p.relative_to(REPO).as_posix()
        if name in HOST_EDGE or name.startswith(HOST_EDGE_FOLDERS):
            continue
        upstream = name in UPSTREAM_MODULES or name.startswith(UPSTREAM_FOLDERS)
        found += [
            hit
            for hit in host_references(p.read_text(encoding="utf-8"), name)
            if not (upstream and hit.endswith("names TDAI_"))
        ]
    assert not found, "host knowledge below the hosts:\n" + "\n".join(found)
    assert "HermesSettings" not in (ROOT / "config.py").read_text(encoding="utf-8")
    assert not (ROOT / "hosts").exists()
