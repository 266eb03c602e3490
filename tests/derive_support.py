"""Shared pieces of the derivation tests: a store with the derivation
projections, table snapshots, and a scripted LLM for the fake OpenAI server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Connection, text

from memstore import Settings
from memstore.store import Store

DERIVED_TABLES = {
    "l1_memories": "id",
    "l1_fts": "rowid",
    "active_generations": "user_id",
    "l1_cursors": "user_id, session_id, generation",
    "derive_generations": "user_id, generation",
    "derive_failures": "user_id, stage, session_id, generation",
    "l2_scenes": "scene_id",
    "l2_state": "user_id, generation",
    "l3_persona": "user_id, generation",
}


def open_store(path: Path | str, settings: Settings) -> Store:
    return Store.open(path, settings=settings)


def snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    with store._db.read() as conn:
        for table, order in DERIVED_TABLES.items():
            cols = "rowid, text, cjk" if table == "l1_fts" else "*"
            rows = conn.execute(text(f"SELECT {cols} FROM {table} ORDER BY {order}")).all()
            out[table] = [tuple(r) for r in rows]
    return out


def fts_index(conn: Connection) -> list[tuple[Any, ...]]:
    """Every (term, rowid, column, offset) l0_fts holds: the index itself, which
    a contentless table cannot show through SELECT."""
    conn.exec_driver_sql(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.l0_vocab USING fts5vocab(main, l0_fts, instance)"
    )
    return list(conn.exec_driver_sql("SELECT term, doc, col, offset FROM temp.l0_vocab").all())


def waiting_messages(store: Store) -> int:
    """Messages whose keyword rows are not written yet (after the cursor)."""
    with store._db.read() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT count(*) FROM l0_messages WHERE id > "
                "(SELECT through FROM l0_keyword_cursor)"
            ).scalar_one()
        )


def say(
    store: Store, user: str, session: str, *texts: str, at: str = "2023-05-08T10:00:00Z"
) -> None:
    store.capture(user, session, [{"role": "user", "content": t, "timestamp": at} for t in texts])


# The scripted LLM lives with the benchmarks, which use it too.
from memstore.bench.scripted_llm import KINDS as KINDS  # noqa: E402
from memstore.bench.scripted_llm import SCENE_OF as SCENE_OF  # noqa: E402
from memstore.bench.scripted_llm import ScriptedLLM as ScriptedLLM  # noqa: E402
from memstore.bench.scripted_llm import between as between  # noqa: E402
from memstore.bench.scripted_llm import json_lines as json_lines  # noqa: E402
