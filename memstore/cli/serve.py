"""``memstore serve``: the HTTP gateway."""

from __future__ import annotations

import click

from memstore.cli.app import Location, cli, db_option, resolve_db
from memstore.db.connect import resolve
from memstore.db.target import safe_url
from memstore.errors import ConfigError


@cli.command()
@db_option
@click.option("--host", default=None, help="Address to listen on  [default: 127.0.0.1]")
@click.option("--port", type=int, default=None, help="Port (0: any free port)  [default: 8420]")
@click.option(
    "--cors-origin", "cors", multiple=True,
    help="Origin allowed to call from a browser (repeatable; '*' for any).",
)  # fmt: skip
@click.option("--max-body-bytes", type=int, default=None, help="Largest request body.")
@click.option(
    "--insecure", is_flag=True,
    help="Allow a non-loopback address without an API key (only behind an authenticating proxy).",
)  # fmt: skip
@click.option("--access-log", is_flag=True, help="Print a line per request (method, path, status).")
@click.option(
    "--allowed-host", "allowed_hosts", multiple=True,
    help="Another Host header name to answer to (repeatable; loopback names and the "
    "--host address are always allowed; '*' for any, only behind a proxy that checks Host).",
)  # fmt: skip
@click.option(
    "--default-user", default=None,
    help="User of requests without user_id  [default: default; env MEMSTORE_GATEWAY_DEFAULT_USER]",
)  # fmt: skip
@click.option(
    "--read-only", is_flag=True,
    help="The inspector (/ui) shows and changes nothing; /mcp offers no tool that writes.",
)  # fmt: skip
@click.option(
    "--workers", type=int, default=1, show_default=True,
    help="Gateway processes sharing the port; more than 1 needs a PostgreSQL store.",
)  # fmt: skip
def serve(
    db: Location | None,
    host: str | None,
    port: int | None,
    cors: tuple[str, ...],
    max_body_bytes: int | None,
    insecure: bool,
    access_log: bool,
    allowed_hosts: tuple[str, ...],
    default_user: str | None,
    read_only: bool,
    workers: int,
) -> None:
    """Serve memory over HTTP: the upstream gateway's routes, /v1, /ui and /mcp.

    /ui is the memory inspector (docs/inspector.md), /mcp the MCP server
    over streamable HTTP (docs/mcp.md).

    Clients of TencentDB Agent Memory's gateway (its Hermes plugin, OpenClaw,
    scripts) work unchanged against it. Listens on 127.0.0.1:8420 by default.
    Set MEMSTORE_GATEWAY_API_KEY (or TDAI_GATEWAY_API_KEY) to require
    "Authorization: Bearer <key>" on every route except GET /health; a
    non-loopback --host needs a key unless --insecure. Requests whose Host
    header is not a loopback name or the --host address get 421 (add names
    with --allowed-host). Stops cleanly on SIGTERM or Ctrl-C. Needs the
    "server" extra: pip install "memstore-agent[server]"; /ui needs "ui" and /mcp
    needs "mcp" (each is left out without its extra). With a key, the
    inspector asks for it on a login form.

    \b
    With --workers N (PostgreSQL only) N processes serve one port and share
    the store: work is claimed once across them, one holds the timers.

    \b
    Example:
      memstore serve --db ./agent.db
      MEMSTORE_DB=postgresql+psycopg://memstore@127.0.0.1:55432/memstore memstore serve --workers 4
      MEMSTORE_GATEWAY_API_KEY=$(openssl rand -hex 24) memstore serve --host 0.0.0.0
      curl -s localhost:8420/health
    """
    try:
        from memstore.gateway.config import GatewayConfig
        from memstore.gateway.server import serve as run
        from memstore.gateway.workers import check_workers, serve_workers
        from memstore.porting.upstream_env import load_settings
    except ImportError as exc:  # fastapi / uvicorn missing
        raise ConfigError(
            f'the gateway needs the "server" extra ({exc.name} is missing): '
            'pip install "memstore-agent[server]"'
        ) from exc
    config = GatewayConfig.from_env(
        host=host,
        port=port,
        cors_origins=tuple(cors) or None,
        max_body_bytes=max_body_bytes,
        insecure=insecure or None,
        access_log=access_log or None,
        allowed_hosts=tuple(allowed_hosts) or None,
        default_user=default_user,
        read_only=read_only or None,
    )
    # The upstream's clients come with the upstream's environment (its LLM variables).
    settings = load_settings()
    # --db after or before the command, else $MEMSTORE_DB (a path or URL), else the default.
    target = resolve(resolve_db(db))
    where = safe_url(target.url) if target.url else str(target.path)
    check_workers(target, workers)

    def ready(url: str) -> None:
        auth = "Bearer auth on" if config.api_key else "no auth (loopback only)"
        procs = f"; {workers} worker processes" if workers > 1 else ""
        click.echo(f"memstore gateway on {url} ({auth}); database {where}{procs}", err=True)

    if workers > 1:
        serve_workers(target, config, settings, workers=workers, on_ready=ready)
    else:
        run(target.url or target.path, config, settings, on_ready=ready)
    click.echo("memstore gateway stopped", err=True)
