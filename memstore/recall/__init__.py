"""Recall: what a host injects before a turn (the read path beside search).

``compose`` builds the stable and per-turn parts within a budget, ``rank``
scores candidates from search, ``text`` renders them.
"""

from memstore.derive.api import list_scenes
from memstore.derive.context import DeriveContext
from memstore.recall.compose import (
    Recall,
    RecalledMemory,
    RecalledMessage,
    navigation_text,
    recall,
)


def scene_navigation(store: DeriveContext, user_id: str, *, generation: int | None = None) -> str:
    return navigation_text(list_scenes(store, user_id, generation=generation))


__all__ = [
    "Recall",
    "RecalledMemory",
    "RecalledMessage",
    "navigation_text",
    "recall",
    "scene_navigation",
]
