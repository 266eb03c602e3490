"""The generated reference pages: ``docs/cli.md`` from the click commands and
``docs/api.md`` from the public ``Store`` methods' signatures and docstrings.

``python scripts/gen_docs.py`` rewrites both; ``--check`` exits 1 when either is
out of date (the docs test runs the same comparison). Generated, so the
reference cannot drift from the code: a new option without help text or a
renamed method shows up as a diff.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]  # the checkout: scripts/..
CLI_DOC = ROOT / "docs" / "cli.md"
API_DOC = ROOT / "docs" / "api.md"

_CLI_HEAD = """# Command-line reference

Generated from the commands themselves by `python scripts/gen_docs.py`; do not
edit by hand. `memstore COMMAND --help` prints the same text.

Every command takes `--db PATH|URL` before or after its name (default
`$MEMSTORE_DB`, else the user data directory). Exit codes: 0 success, 1 an
error memstore reports (`error: ...` on stderr), 2 a usage error (unknown
option, missing argument), 3 erasure committed but the file is not yet
compacted, 130 interrupted.
"""


def iter_commands(
    group: click.Group, prefix: str = "memstore"
) -> list[tuple[str, click.Command]]:
    """Every command under ``group`` with its full name, depth-first, sorted."""
    ctx = click.Context(group, info_name=prefix)
    out: list[tuple[str, click.Command]] = [(prefix, group)]
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        full = f"{prefix} {name}"
        if isinstance(cmd, click.Group):
            out += iter_commands(cmd, full)
        else:
            out.append((full, cmd))
    return out


def options_without_help(group: click.Group) -> list[str]:
    """``command --option`` for every option that has no help text."""
    missing = []
    for full, cmd in iter_commands(group):
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip():
                missing.append(f"{full} {p.opts[0]}")
    return missing


def render_cli(group: click.Group) -> str:
    parts = [_CLI_HEAD]
    for full, cmd in iter_commands(group):
        # A fixed width, so the page does not depend on the terminal that made it.
        # -h as the root group gives every command (click caches the help option, so
        # the page must not depend on whether a real invocation came first).
        ctx = click.Context(
            cmd,
            info_name=full,
            terminal_width=88,
            max_content_width=88,
            help_option_names=["-h", "--help"],
        )
        help_text = cmd.get_help(ctx)
        parts += [f"## `{full}`", "", "```", help_text.rstrip(), "```", ""]
    return "\n".join(parts).rstrip() + "\n"


_API_HEAD = """# Python API reference

Generated from the docstrings by `python scripts/gen_docs.py`; do not edit by
hand. Everything here is importable from `memstore` (`from memstore import
Store`). Errors raised on purpose are subclasses of `memstore.MemstoreError`
(`memstore/errors.py`). A tour with runnable examples is in
[getting-started.md](getting-started.md).

Every method about one user takes `user_id` first, positionally or as
`user_id=...`: `store.list_memories("alice")`, `store.recall("alice", "where
do I live?")`. The query-first spelling of earlier versions
(`store.recall("where do I live?", user_id="alice")`, likewise for
`search_conversations`, `search_memories` and `recall_preview`) still works in
this version with a `DeprecationWarning`.
"""


def _public_methods(cls: type) -> list[str]:
    return [n for n, _ in inspect.getmembers(cls) if not n.startswith("_")]


def render_api() -> str:
    from memstore.store import Store

    parts = [_API_HEAD, "## `Store`", "", inspect.getdoc(Store) or "", ""]
    for name in _public_methods(Store):
        member = inspect.getattr_static(Store, name)
        func = member.__func__ if isinstance(member, classmethod | staticmethod) else member
        if isinstance(func, property):
            parts += [f"### `Store.{name}` (property)", "", inspect.getdoc(func) or "", ""]
            continue
        if not callable(func):
            continue
        try:
            # Through the class, so a classmethod's signature drops ``cls``.
            sig = str(inspect.signature(getattr(Store, name))).replace("'", "")
            # A function default prints with its address: keep its name only.
            sig = re.sub(r"<function (\w+) at 0x[0-9a-f]+>", r"\1", sig)
        except (TypeError, ValueError):
            sig = "(...)"
        doc = inspect.getdoc(func) or "(no docstring)"
        parts += [f"### `Store.{name}`", "", "```python", f"{name}{sig}", "```", "", doc, ""]
    parts += ["## Records", "", "What `Store` returns: frozen dataclasses.", ""]
    for cls in _records():
        parts += _record(cls)
    return "\n".join(parts).rstrip() + "\n"


def _records() -> list[type]:
    import memstore

    names = ["Memory", "Scene", "Hit", "Recall", "RecalledMemory", "RecalledMessage",
             "CaptureResult", "ErasureReport"]  # fmt: skip
    return [getattr(memstore, n) for n in names]


def _record(cls: type) -> list[str]:
    import dataclasses

    rows = [
        f"| `{f.name}` | `{_type_name(f.type)}` |"
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if not f.name.startswith("_")
    ]
    props = [
        f"| `{n}` (property) | {(inspect.getdoc(p) or '').splitlines()[0]} |"
        for n, p in vars(cls).items()
        if isinstance(p, property) and not n.startswith("_")
    ]
    doc = inspect.getdoc(cls) or ""
    if doc.startswith(f"{cls.__name__}("):  # dataclasses' generated docstring
        doc = ""
    return [f"### `{cls.__name__}`", "", doc, "", "| field | type |", "|---|---|",
            *rows, *props, ""]  # fmt: skip


def _type_name(hint: object) -> str:
    text = hint.__name__ if isinstance(hint, type) else str(hint)
    return str(text).replace("typing.", "").replace("|", "\\|")


def generated() -> dict[Path, str]:
    from memstore.cli import load_all

    return {CLI_DOC: render_cli(load_all()), API_DOC: render_api()}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    stale = []
    for path, text in generated().items():
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != text:
            stale.append(path)
            if "--check" not in args:
                path.write_text(text, encoding="utf-8")
    for path in stale:
        verb = "out of date" if "--check" in args else "wrote"
        print(f"{verb}: {path.relative_to(ROOT)}")
    return 1 if stale and "--check" in args else 0


if __name__ == "__main__":
    raise SystemExit(main())
