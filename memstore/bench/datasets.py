"""Which data set a bench path holds, read into the bench's shapes.

``memstore bench locomo PATH`` takes a LoCoMo JSON file, a BEAM chat
directory (one chat or a directory of numbered chats), or LoCoMo-Plus
(``locomo_plus.json`` or the directory holding it); ``--dataset`` names the
format when the guess is not wanted. Each format brings the categories its
questions are scored in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from memstore.bench import beam_data, locomoplus_data
from memstore.bench.locomo_data import Conversation, load_locomo
from memstore.errors import InvalidInputError

__all__ = ["DATASETS", "LOCOMO_CATEGORIES", "BenchData", "detect_dataset", "load_bench_data"]

DATASETS = ("locomo", "beam", "locomo-plus")
# Category 5 (adversarial) has no evidence and no answer to grade: left out.
LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
}


@dataclass(frozen=True)
class BenchData:
    dataset: str  # one of DATASETS
    conversations: list[Conversation]
    categories: dict[int, str]  # the scored categories, in report order


def detect_dataset(path: str | Path) -> str:
    p = Path(path)
    if p.is_dir():
        if (p / locomoplus_data.PLUS_FILE).is_file():
            return "locomo-plus"
        if beam_data.is_beam_dir(p):
            return "beam"
        raise InvalidInputError(
            f"{str(p)!r}: a directory must hold BEAM chats or {locomoplus_data.PLUS_FILE}"
        )
    try:
        with p.open(encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"cannot read bench data {str(p)!r}: {exc}") from exc
    return "locomo-plus" if locomoplus_data.is_locomo_plus(data) else "locomo"


def load_bench_data(
    path: str | Path, dataset: str = "auto", hosts: str | Path | None = None
) -> BenchData:
    """``dataset``: ``auto`` (guess from the path) or one of ``DATASETS``;
    ``hosts``: LoCoMo-Plus only, the LoCoMo file its cues are stitched into."""
    kind = detect_dataset(path) if dataset == "auto" else dataset
    if kind not in DATASETS:
        raise InvalidInputError(f"dataset must be auto or one of {', '.join(DATASETS)}")
    if hosts is not None and kind != "locomo-plus":
        raise InvalidInputError("--hosts applies to LoCoMo-Plus only")
    if kind == "beam":
        return BenchData(kind, beam_data.load_beam(path), dict(beam_data.CATEGORIES))
    if kind == "locomo-plus":
        convs = locomoplus_data.load_locomo_plus(path, hosts)
        return BenchData(kind, convs, dict(locomoplus_data.CATEGORIES))
    if Path(path).is_dir():
        raise InvalidInputError(f"{str(path)!r}: LoCoMo data is a JSON file, not a directory")
    return BenchData(kind, load_locomo(path), dict(LOCOMO_CATEGORIES))
