"""Which module defines each top-level command, and its one-line help.

``memstore --help`` and ``memstore COMMAND`` read this table instead of
importing every command module (and with them SQLAlchemy, numpy, openai...),
so the CLI answers fast. tests/cli/test_cli_habits.py checks that the table
matches the commands the modules define.
"""

from __future__ import annotations

MODULES = (
    "memstore.cli.core",
    "memstore.cli.bench",
    "memstore.cli.bench_workers",
    "memstore.cli.bench_probes",
    "memstore.cli.bench_load",
    "memstore.cli.data",
    "memstore.cli.demo",
    "memstore.cli.derive",
    "memstore.cli.forget",
    "memstore.hermes_provider.cli",
    "memstore.cli.pipeline",
    "memstore.cli.serve",
    "memstore.cli.hosts",
    "memstore.cli.porting",
    "memstore.cli.users",
)

# name -> (modules that define it or its subcommands, short help)
COMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    "bench": (("memstore.cli.bench", "memstore.cli.bench_workers", "memstore.cli.bench_probes",
               "memstore.cli.bench_load"),
              "Benchmarks: event log, capture/search speed, LoCoMo retrieval quality, report."),
    "capture": (("memstore.cli.data",), "Capture one conversation turn into L0."),
    "db": (("memstore.cli.core",), "Schema migrations of the database file."),
    "demo": (("memstore.cli.demo",),
             "Run a scripted two-session conversation through L0 → L1 → L2 → L3 and a recall."),
    "doctor": (("memstore.cli.core",),
               "Check the installation: Python, SQLite, sqlite-vec, FTS5, schema, embedder, LLM."),
    "events": (("memstore.cli.core",), "Read the event log (the only source of truth)."),
    "export": (("memstore.cli.porting",),
               "Export a user's data (or everyone's) as JSONL events or Markdown."),
    "generations": (("memstore.cli.derive",), "List a user's derivation generations."),
    "hermes": (("memstore.hermes_provider.cli",),
               "Use memstore as the long-term memory of a Hermes agent (hermes-agent)."),
    "import": (("memstore.cli.porting",),
               "Import conversations or a whole memory, checking every line."),
    "mcp": (("memstore.cli.hosts",),
            "Serve one user's memory to an MCP client (Claude, Cursor, Hermes) over stdio."),
    "memories": (("memstore.cli.derive",), "L1 atomic memories: list, history, forget, add."),
    "messages": (("memstore.cli.forget",), "L0 messages: erase some."),
    "persona": (("memstore.cli.derive",), "L3 persona."),
    "pipeline": (("memstore.cli.pipeline",),
                 "The derivation pipeline: pending work, timers, failures; run it now."),
    "projections": (("memstore.cli.core",),
                    "Projections: tables derived from the log, rebuildable at any time."),
    "recall": (("memstore.cli.derive",), "Show what would be injected before a turn for QUERY."),
    "rederive": (("memstore.cli.derive",),
                 "Derive memories again from the captured conversations into a new generation."),
    "retention": (("memstore.cli.forget",),
                  "Erase what is older than the retention limits (MEMSTORE_RETENTION_DAYS)."),
    "reindex": (("memstore.cli.data",),
                "Embed every message and memory not yet embedded with the configured model."),
    "scenes": (("memstore.cli.derive",), "L2 scene blocks."),
    "search": (("memstore.cli.data",), "Search conversations (L0) or memories (L1) of one user."),
    "sessions": (("memstore.cli.forget",), "Sessions: erase one."),
    "serve": (("memstore.cli.serve",),
              "Serve memory over HTTP: the upstream gateway's routes, /v1, /ui and /mcp."),
    "ui": (("memstore.cli.hosts",),
           "Open the memory inspector for a local store in the browser (loopback only)."),
    "users": (("memstore.cli.data", "memstore.cli.users"), "Per-user operations."),
}  # fmt: skip

__all__ = ["COMMANDS", "MODULES"]
