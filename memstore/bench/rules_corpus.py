"""Precision and recall of the offline rule deriver on a labelled corpus.

A corpus is JSON Lines, one message per line::

    {"text": "I'm vegetarian.", "lang": "en", "expect": "persona",
     "topic": "diet", "key": "vegetarian"}

``expect`` is a memory type, a list of acceptable types, or ``"none"`` (the
message must yield no memory). Optional: ``key`` (the memory's text must
contain it, case-insensitively, so a memory that lost the fact does not
count), ``priority`` (e.g. -1: a standing instruction must be global) and
``role`` (default ``user``; assistant lines must never yield memories).

Scoring is per message. A positive message is a true positive when one of
its memories has an expected type, the key and the priority; otherwise it
is a false negative, and also a false positive when it yielded a wrong
memory. A ``none`` message that yields anything is a false positive.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstore.bench.metrics import percentile
from memstore.derive.memories.rules import extract
from memstore.derive.prompts import ExtractedMemory
from memstore.derive.queries import L0Message
from memstore.errors import InvalidInputError

TYPES = frozenset({"persona", "episodic", "instruction"})
# A fixed capture time, so dated statements resolve the same way in every run.
CORPUS_TIME = "2024-03-15T10:00:00.000000Z"
TIMING_ROUNDS = 20


@dataclass(frozen=True)
class CorpusItem:
    text: str
    lang: str
    expect: frozenset[str]  # empty: must yield nothing
    topic: str
    key: str = ""
    priority: int | None = None
    role: str = "user"


def _item(raw: Any, where: str) -> CorpusItem:
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{where}: expected a JSON object")
    text, lang, expect = raw.get("text"), raw.get("lang"), raw.get("expect")
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"{where}: 'text' must be a non-empty string")
    if lang not in ("en", "zh"):
        raise InvalidInputError(f"{where}: 'lang' must be 'en' or 'zh', got {lang!r}")
    wanted = [expect] if isinstance(expect, str) else expect
    if not isinstance(wanted, list) or not all(isinstance(t, str) for t in wanted):
        raise InvalidInputError(f"{where}: 'expect' must be a type, a list of types or 'none'")
    types = frozenset(t for t in wanted if t != "none")
    if (types and "none" in wanted) or not types <= TYPES or not wanted:
        raise InvalidInputError(f"{where}: bad 'expect' {expect!r}; types are {sorted(TYPES)}")
    priority = raw.get("priority")
    if priority is not None and not isinstance(priority, int):
        raise InvalidInputError(f"{where}: 'priority' must be an integer")
    role = raw.get("role", "user")
    if role not in ("user", "assistant"):
        raise InvalidInputError(f"{where}: 'role' must be 'user' or 'assistant'")
    if role == "assistant" and types:
        raise InvalidInputError(f"{where}: an assistant message cannot expect a memory")
    return CorpusItem(
        text=text,
        lang=lang,
        expect=types,
        topic=str(raw.get("topic", "")),
        key=str(raw.get("key", "")),
        priority=priority,
        role=role,
    )


def load_corpus(path: Path) -> list[CorpusItem]:
    """The items of a JSON Lines corpus; blank lines are skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InvalidInputError(f"cannot read corpus {path}: {e}") from e
    items: list[CorpusItem] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"{path}:{n}: not JSON: {e}") from e
        items.append(_item(raw, f"{path}:{n}"))
    if not items:
        raise InvalidInputError(f"corpus {path} is empty")
    return items


def derive(item: CorpusItem) -> list[ExtractedMemory]:
    return extract([L0Message(1, "m1", item.role, item.text, CORPUS_TIME, 1)], 20)


def matches(item: CorpusItem, mem: ExtractedMemory) -> bool:
    return (
        mem.type in item.expect
        and item.key.casefold() in mem.content.casefold()
        and (item.priority is None or mem.priority == item.priority)
    )


def _ratio(a: int, b: int) -> float:
    return a / b if b else 0.0


def score(
    items: Sequence[CorpusItem], derive_fn: Callable[[CorpusItem], list[ExtractedMemory]] = derive
) -> dict[str, Any]:
    """Counts, precision and recall overall and per language and topic, with the misses."""
    groups: dict[str, dict[str, int]] = {}
    mistakes: list[dict[str, Any]] = []
    for item in items:
        got = derive_fn(item)
        tp = bool(item.expect) and any(matches(item, m) for m in got)
        fn = bool(item.expect) and not tp
        fp = bool(got) and not tp
        for name in ("all", f"lang:{item.lang}", f"topic:{item.topic}"):
            g = groups.setdefault(name, {"n": 0, "positives": 0, "tp": 0, "fp": 0, "fn": 0})
            g["n"] += 1
            g["positives"] += bool(item.expect)
            g["tp"] += tp
            g["fp"] += fp
            g["fn"] += fn
        if fp or fn:
            mistakes.append(
                {
                    "text": item.text,
                    "expect": sorted(item.expect) or ["none"],
                    "got": [f"{m.type}({m.priority}): {m.content}" for m in got],
                    "kind": "FP" if fp and not fn else "FN" if fn and not fp else "FN+FP",
                }
            )
    out: dict[str, Any] = {}
    for name, g in groups.items():
        out[name] = {
            **g,
            "precision": _ratio(g["tp"], g["tp"] + g["fp"]),
            "recall": _ratio(g["tp"], g["positives"]),
        }
    return {"groups": out, "mistakes": mistakes}


def _timing(items: Sequence[CorpusItem]) -> dict[str, float]:
    # The reference is the cheapest possible look at the same text (lower-casing
    # and a word split), timed in the same run, so a slow box shows as slow in both.
    msgs = [L0Message(1, "m1", "user", i.text, CORPUS_TIME, 1) for i in items]
    per_msg: list[float] = []
    ref: list[float] = []
    for _ in range(TIMING_ROUNDS):
        for msg in msgs:
            t0 = time.perf_counter()
            extract([msg], 20)
            t1 = time.perf_counter()
            msg.text.casefold().split()
            t2 = time.perf_counter()
            per_msg.append((t1 - t0) * 1e6)
            ref.append((t2 - t1) * 1e6)
    return {
        "extract_us_p50": percentile(per_msg, 50),
        "extract_us_p95": percentile(per_msg, 95),
        "reference_split_us_p50": percentile(ref, 50),
    }


def run_rules_bench(paths: Sequence[Path]) -> dict[str, Any]:
    corpora: dict[str, Any] = {}
    for path in paths:
        items = load_corpus(path)
        corpora[path.name] = {**score(items), "timing": _timing(items)}
    return {"corpora": corpora}


def format_rules_bench(res: dict[str, Any], show_mistakes: bool = False) -> str:
    lines: list[str] = []
    for name, c in res["corpora"].items():
        lines.append(f"{name}")
        lines.append(f"  {'group':<22}{'n':>5}{'pos':>5}{'tp':>5}{'fp':>5}{'fn':>5}  prec  recall")
        keys = sorted(c["groups"], key=lambda k: (k != "all", not k.startswith("lang:"), k))
        for key in keys:
            g = c["groups"][key]
            lines.append(
                f"  {key:<22}{g['n']:>5}{g['positives']:>5}{g['tp']:>5}{g['fp']:>5}{g['fn']:>5}"
                f"  {g['precision']:.3f} {g['recall']:.3f}"
            )
        t = c["timing"]
        lines.append(
            f"  extract per message: p50 {t['extract_us_p50']:.0f} µs, p95 "
            f"{t['extract_us_p95']:.0f} µs (reference casefold+split p50 "
            f"{t['reference_split_us_p50']:.1f} µs)"
        )
        if show_mistakes:
            for m in c["mistakes"]:
                lines.append(f"  {m['kind']:<6} {m['text']}  expect={m['expect']}  got={m['got']}")
        lines.append("")
    return "\n".join(lines)
