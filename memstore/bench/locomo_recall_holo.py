"""Hermes' holographic provider's ``prefetch`` on the recall bench's questions.

``prefetch(query)`` is what Hermes injects before a turn when holographic is
the memory provider. Every turn is added through its ``fact_store`` tool (as
in ``peers_holographic``); the prefetched lines (``- [trust] content``) map
back to turns by their text, and are scored exactly as memstore's recall is
(``locomo_recall.score_question``); off-topic questions count when the
prefetch is not empty.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from memstore.bench.locomo_data import Conversation
from memstore.bench.peers_holographic import CountWarnings


class Scores(Protocol):
    def summary(self) -> dict[str, Any]: ...


# ``locomo_recall._add_raw``: handed in, since that module runs this one.
AddRaw = Callable[[Any, str, str, set[str], bool, int | str, Sequence[str], dict[str, str]], None]


def run_holographic_prefetch(
    convs: Sequence[Conversation],
    off_topic: Sequence[str],
    calibration: Sequence[str],
    acc: Scores,
    add_raw: AddRaw,
    *,
    log: Callable[[str], None] = lambda _: None,
    progress: bool = True,
) -> dict[str, Any]:
    try:
        version = importlib.metadata.version("hermes-agent")
    except importlib.metadata.PackageNotFoundError:
        return {"error": 'hermes-agent is not installed (pip install "memstore-agent[hermes]")'}
    # One "HRR storage near capacity" warning per add past ~250 facts: silenced.
    quiet = CountWarnings()
    hrr_log = logging.getLogger("plugins.memory.holographic.holographic")
    hrr_log.addFilter(quiet)
    old_home = os.environ.get("HERMES_HOME")
    with tempfile.TemporaryDirectory(prefix="holo-recall-") as tmp:
        os.environ["HERMES_HOME"] = tmp  # keep the provider out of ~/.hermes
        try:
            cls = importlib.import_module("plugins.memory.holographic").HolographicMemoryProvider
            for conv in convs:
                _one(cls, conv, Path(tmp), acc, add_raw, off_topic, set(calibration), progress)
                log(f"holographic prefetch {conv.sample_id}: done")
        except Exception as exc:  # a peer's failure is a result to report
            return {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            hrr_log.removeFilter(quiet)
            if old_home is None:
                os.environ.pop("HERMES_HOME", None)
            else:
                os.environ["HERMES_HOME"] = old_home
    return {"version": f"hermes-agent {version}", **acc.summary()}


def _one(
    cls: Any,
    conv: Conversation,
    base: Path,
    acc: Any,
    add_raw: AddRaw,
    off_topic: Sequence[str],
    calibration: set[str],
    progress: bool,
) -> None:
    from memstore.bench.locomo_index import scored_questions, turn_text

    provider = cls(config={"db_path": str(base / f"{conv.sample_id}.db")})
    provider.initialize(f"locomo-{conv.sample_id}", hermes_home=str(base), platform="cli")
    try:
        ids_of: dict[str, list[str]] = {}
        texts: dict[str, str] = {}
        for t in tqdm(conv.turns, desc=f"holo {conv.sample_id}", disable=not progress, leave=False):
            content = turn_text(t.speaker, t.text)
            texts[t.dia_id] = content
            ids_of.setdefault(content.strip(), []).append(t.dia_id)
            args = {"action": "add", "content": content, "category": "general"}
            reply = json.loads(provider.handle_tool_call("fact_store", args))
            if "fact_id" not in reply:
                raise RuntimeError(f"fact_store add answered {reply}")
        asks: list[tuple[str, int | str, list[str]]] = [
            (q.question, q.category, q.evidence) for q in scored_questions(conv)
        ]
        asks += [(q, "calibration" if q in calibration else "held_out", []) for q in off_topic]
        for question, cat, evidence in asks:
            text = provider.prefetch(question) or ""
            ids: set[str] = set()
            for line in text.splitlines():
                if line.startswith("- ["):
                    content = line.split("] ", 1)[1] if "] " in line else ""
                    ids.update(ids_of.get(content.strip(), []))
            add_raw(acc, text, text, ids, bool(text.strip()), cat, evidence, texts)
    finally:
        provider.shutdown()
