"""The checks ``memstore doctor`` runs after the database's own: one table,
in the order they run (no command module adds to it by being imported)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from memstore.cli.app import resolve_db
from memstore.errors import MemstoreError

Check = Callable[[Path | str, dict[str, Any], list[str]], None]


def check_embedder(db: Path | str, report: dict[str, Any], problems: list[str]) -> None:
    """The configured embedder, and how far the store's vectors are."""
    from memstore.config import Settings
    from memstore.embeddings import describe_embedder, make_embedder

    try:
        settings = Settings.load()
        emb = make_embedder(settings)
        report["embedder"] = describe_embedder(emb)
        if report.get("schema_revision") is not None and emb is not None:
            from memstore.store import Store

            with Store.open(
                resolve_db(db), settings=settings.replace(background_indexer=False, scheduler=False)
            ) as s:
                report["embeddings"] = s.embedding_status()
    except MemstoreError as e:
        problems.append(f"embedder: {e}")


CHECKS: tuple[Check, ...] = (check_embedder,)
