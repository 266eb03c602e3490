"""``memstore ui`` (the inspector for a local store) and ``memstore mcp``
(the MCP server over stdio)."""

from __future__ import annotations

import os
import webbrowser

import click

from memstore.cli.app import Location, cli, db_option, resolve_db
from memstore.db.connect import resolve
from memstore.errors import ConfigError


@cli.command()
@db_option
@click.option("--port", type=int, default=0, help="Port  [default: any free port]")
@click.option("--open", "open_browser", is_flag=True, help="Open the inspector in the browser.")
@click.option("--read-only", is_flag=True, help="Show the memory; offer no action that changes it.")
def ui(db: Location | None, port: int, open_browser: bool, read_only: bool) -> None:
    """Open the memory inspector for a local store in the browser (loopback only).

    Serves the gateway on 127.0.0.1 only (the inspector at /ui, the API
    beside it) until Ctrl-C. Needs the "ui" extra: pip install "memstore-agent[ui]".

    \b
    Example:
      memstore ui --db ./agent.db --open
    """
    try:
        import jinja2  # noqa: F401

        from memstore.gateway.config import GatewayConfig
        from memstore.gateway.server import serve as run
    except ImportError as exc:
        raise ConfigError(
            f'the inspector needs the "ui" extra ({exc.name} is missing): '
            'pip install "memstore-agent[ui]"'
        ) from exc
    config = GatewayConfig.from_env(host="127.0.0.1", port=port, read_only=read_only or None)
    target = resolve(resolve_db(db))

    def ready(url: str) -> None:
        page = f"{url}/ui/"
        click.echo(f"memstore inspector on {page} (Ctrl-C stops it)", err=True)
        if open_browser:
            webbrowser.open(page)

    run(target.url or target.path, config, on_ready=ready)
    click.echo("memstore inspector stopped", err=True)


@cli.command()
@db_option
@click.option(
    "--user", "user", default=None,
    help="The user every call acts for  [env MEMSTORE_USER; default: default]",
)  # fmt: skip
@click.option("--read-only", is_flag=True, help="Offer no tool that writes (remember, forget...).")
def mcp(db: Location | None, user: str | None, read_only: bool) -> None:
    """Serve one user's memory to an MCP client (Claude, Cursor, Hermes) over stdio.

    Tools: recall, search_memories, search_conversations, list_memories,
    remember, forget, capture; resources: memstore://persona,
    memstore://scenes and memstore://scenes/{name}. Every call acts for the
    one user given by --user (or MEMSTORE_USER). Needs the "mcp" extra:
    pip install "memstore-agent[mcp]". docs/mcp.md has client configurations.

    \b
    Example (what an MCP client runs):
      memstore mcp --db ~/agent.db --user alice
    """
    try:
        from memstore.mcpserver.stdio import run_stdio
    except ImportError as exc:
        raise ConfigError(
            f'the MCP server needs the "mcp" extra ({exc.name} is missing): '
            'pip install "memstore-agent[mcp]"'
        ) from exc
    chosen = user if user is not None else (os.environ.get("MEMSTORE_USER") or "default")
    run_stdio(resolve_db(db), chosen, read_only=read_only)
