"""The documentation runs as written and the generated references are current.

README.md's Python blocks run in order in one interpreter (as its text says);
each docs/*.md file's Python blocks run in order in a namespace of their own.
A block right after ``<!-- not run: REASON -->`` is left out (it needs a
server the test does not have). The shell blocks of README.md and
docs/getting-started.md whose lines are all ``memstore`` commands (one may read
an ``echo`` through a pipe) run through a shell and the installed command, in
order, against one fresh database per page. Everything runs in a temporary
directory with the offline defaults: no LLM (the rule deriver) and the hashing
embedder, so no model loads.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- not run: [^>]*-->\s*\n)?```(\w+)\n(.*?)```", re.S)


def blocks(path: Path, lang: str) -> list[str]:
    return [
        body
        for skip, kind, body in BLOCK.findall(path.read_text(encoding="utf-8"))
        if kind == lang and not skip
    ]


def gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMSTORE_DB", str(tmp_path / "cli.db"))
    for name in list(os.environ):
        if name.startswith(("MEMSTORE_LLM_", "OPENAI_")):
            monkeypatch.delenv(name)
    return tmp_path


def run_python(path: Path) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for i, code in enumerate(blocks(path, "python"), 1):
        try:
            exec(compile(code, f"{path.name} python block {i}", "exec"), namespace)
        except Exception as exc:  # the block and the error, not a bare traceback
            raise AssertionError(f"{path.name}, Python block {i} failed:\n{code}") from exc
    # A block that opened a store and left it open would leak into the next file.
    store = namespace.get("store")
    close = getattr(store, "close", None)
    if callable(close):
        close()
    return namespace


def test_readme_python_runs_in_order(offline: Path) -> None:
    assert len(blocks(ROOT / "README.md", "python")) >= 2
    namespace = run_python(ROOT / "README.md")
    # What the README prints is what it says: the persona for the system
    # prompt is there once the example has run the pipeline.
    assert "<user-persona>" in str(getattr(namespace["recall"], "stable", ""))


def test_install_hints_name_the_distribution() -> None:
    # `pip install memstore` installs an unrelated package of that name.
    wrong = re.compile(r"""pip install ['"]?memstore\[""")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("memstore/**/*.py")]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if wrong.search(line)
    ]
    assert found == []


# api.md's blocks are signatures from the generated reference, not examples.
DOC_FILES = sorted(
    p for p in (ROOT / "docs").glob("*.md") if p.name != "api.md" and blocks(p, "python")
)


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.name)
def test_docs_python_runs(offline: Path, path: Path) -> None:
    run_python(path)


# Pages a newcomer follows command by command. Other pages' blocks need data,
# a network or a server (fetch-data, an upstream directory, curl).
CLI_PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]
CLI_LINE = re.compile(r"^(echo [^|]*\| )?memstore ")


@pytest.mark.parametrize("path", CLI_PAGES, ids=lambda p: p.name)
def test_cli_commands_run(offline: Path, path: Path) -> None:
    # Through a shell, as a reader types them: pipes and redirections included.
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    ran = 0
    for body in blocks(path, "sh"):
        lines = [ln.split("  #")[0].strip() for ln in body.splitlines() if ln.strip()]
        if not all(CLI_LINE.match(ln) for ln in lines):
            continue  # an install block: pip is not run here
        for line in lines:
            done = subprocess.run(
                ["bash", "-c", line], capture_output=True, text=True, timeout=300, env=env
            )
            assert done.returncode == 0, f"{line!r} exited {done.returncode}: {done.stderr}"
            ran += 1
    assert ran >= 3


def test_generated_references_are_current() -> None:
    stale = [
        path.name
        for path, text in gen_docs().generated().items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"out of date: {stale}; run: python scripts/gen_docs.py"


def test_every_cli_option_has_help() -> None:
    from memstore.cli import load_all

    assert gen_docs().options_without_help(load_all()) == []


def test_every_command_is_in_the_cli_reference() -> None:
    from memstore.cli import load_all

    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    names = [full for full, _ in gen_docs().iter_commands(load_all())]
    assert len(names) > 20
    assert [n for n in names if f"## `{n}`" not in text] == []


def test_docs_links_resolve() -> None:
    link = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in link.findall(page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.name}: {target}")
    assert broken == []


def test_the_docs_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "index.md")
    assert [name for name in pages if f"]({name})" not in index] == []


def _unknown_in(cli: click.Group, args: list[str]) -> str | None:
    """What of ``memstore ARGS`` names no command or option (None: all exist).
    Placeholder values (FILE, N) and missing arguments are not the point here."""
    ctx = click.Context(cli)
    cmd: click.Command = cli
    i = 0
    while isinstance(cmd, click.Group):
        while i < len(args) and args[i].startswith("-"):
            i += 2 if args[i] == "--db" else 1
        if i >= len(args):
            return None
        sub = cmd.get_command(ctx, args[i])
        if sub is None:
            return f"no command {args[i]!r}"
        cmd, i = sub, i + 1
    try:
        cmd.make_context(cmd.name, args[i:], parent=ctx)
    except click.NoSuchOption as exc:
        return exc.format_message()
    except (click.UsageError, click.exceptions.Exit):
        pass
    return None


def test_documented_command_lines_name_real_commands_and_options() -> None:
    from memstore.cli import load_all

    cli = load_all()
    wrong = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for body in re.findall(r"```\w*\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            for line in body.replace("\\\n", " ").splitlines():
                line = re.split(r"\s[|>]\s|\s#", line.strip())[0]
                if re.match(r"memstore \S", line):  # not the import help's "memstore  a ..."
                    problem = _unknown_in(cli, shlex.split(line)[1:])
                    if problem:
                        wrong.append(f"{page.name}: {line}: {problem}")
    assert wrong == []
