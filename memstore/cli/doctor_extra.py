"""Hooks other layers add to ``memstore doctor`` (embedder, LLM, pipeline)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

Hook = Callable[[Path | str, dict[str, Any], list[str]], None]
HOOKS: list[Hook] = []
