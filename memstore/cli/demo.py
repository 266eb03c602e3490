"""``memstore demo``: a scripted conversation through every layer, offline."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import click

from memstore.cli.app import DB, Location, cli, shown
from memstore.cli.table import plural
from memstore.config import Settings
from memstore.store import Store

USER = "ada"

# (session, timestamp, user text, assistant text)
SCRIPT: list[tuple[str, str, str, str]] = [
    (
        "monday",
        "2024-03-04T09:00:00Z",
        "Hi! My name is Ada and I work as a data engineer in Berlin.",
        "Nice to meet you, Ada! How can I help?",
    ),
    (
        "monday",
        "2024-03-04T09:02:00Z",
        "I love hiking in the Alps and I hate crowded beaches.",
        "Mountains over beaches, noted.",
    ),
    (
        "monday",
        "2024-03-04T09:05:00Z",
        "Please always answer with short bullet points.",
        "- Will do.",
    ),
    (
        "monday",
        "2024-03-04T09:08:00Z",
        "Yesterday I finished migrating our pipelines to Airflow.",
        "- Congratulations on the migration.",
    ),
    (
        "thursday",
        "2024-03-07T18:30:00Z",
        "我喜欢喝乌龙茶，不喜欢咖啡。",
        "好的，记住了：乌龙茶，不要咖啡。",
    ),
    (
        "thursday",
        "2024-03-07T18:35:00Z",
        "I moved to Munich last week, so I live in Munich now.",
        "- Updated: you live in Munich.",
    ),
]

QUESTION = "Where does Ada live now?"


def _section(title: str) -> None:
    click.echo("")
    click.secho(f"== {title} ", bold=True, nl=False)
    click.echo("=" * max(0, 60 - len(title)))


def run_demo(path: Location, echo: bool = True) -> dict[str, Any]:
    settings = Settings.load().replace(background_indexer=False, scheduler=False)
    out: dict[str, Any] = {}
    with Store.open(path, settings=settings) as store:
        deriver = (
            "LLM " + settings.llm.model if settings.llm.configured else "offline rule-based deriver"
        )
        if echo:
            click.echo(
                f"database: {shown(path)}\nderiver: {deriver}\nembedder: "
                f"{store.embedding_model or 'none'}"
            )
            _section("L0: two sessions captured")
        for session, ts, user_text, assistant_text in SCRIPT:
            store.capture_turn(USER, session, user_text, assistant_text, timestamp=ts)
            if echo:
                click.echo(
                    f"[{session}] user: {user_text}\n[{session}] assistant: {assistant_text}"
                )
        for session in dict.fromkeys(s for s, *_ in SCRIPT):
            store.end_session(USER, session, timeout_s=60)
        store.run_pipeline(USER)
        store.reindex()
        memories = store.list_memories(USER)
        scenes = store.list_scenes(USER)
        persona = store.get_persona(USER) or ""
        recall = store.recall(USER, QUESTION)
        out = {"memories": memories, "scenes": scenes, "persona": persona, "recall": recall.text}
        if echo:
            _section(f"L1: {plural(len(memories), 'atomic memory', 'atomic memories')}")
            for m in memories:
                click.echo(f"- [{m.type}, p{m.priority}, {m.scene_name or '-'}] {m.content}")
            retired = [
                m for m in store.list_memories(USER, include_retired=True) if m.status != "active"
            ]
            for m in retired:
                click.echo(f"  (superseded: {m.content})")
            _section(f"L2: {len(scenes)} scene blocks")
            for s in scenes:
                click.echo(f"- {s.name} (heat {s.heat}): {s.summary}")
            _section("L3: persona")
            click.echo(persona or "(none yet)")
            _section(f"recall for: {QUESTION!r}")
            click.echo(recall.text)
    return out


@cli.command()
@click.option(
    "--db",
    "db",
    type=DB,
    default=None,
    help="Keep the demo database here, a file or PostgreSQL URL (default: a temporary file).",
)
def demo(db: Location | None) -> None:
    """Run a scripted two-session conversation through L0 → L1 → L2 → L3 and a recall.

    Works offline: without MEMSTORE_LLM_* settings the rule-based deriver
    extracts the memories. Uses a temporary database unless --db is given.

    \b
    Example:
      memstore demo
      MEMSTORE_EMBEDDER=hashing memstore demo --db ./demo.db
    """
    if db is not None:
        run_demo(db)
        return
    with tempfile.TemporaryDirectory(prefix="memstore-demo-") as tmp:
        run_demo(Path(tmp) / "demo.db")
