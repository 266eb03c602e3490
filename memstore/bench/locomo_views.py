"""Recall on LoCoMo with the speaker as data (``memstore bench locomo --recall``).

Each conversation is stored once per *view*, the way a host would store it:

- ``agent``: the first speaker is the user (role ``user``), the other the
  assistant (role ``assistant``);
- ``group``: every turn has role ``user`` (a group chat);

one ``user_id`` per conversation, each message carrying its speaker as the
OpenAI ``name`` and, as its text, the turn's words only (a shared photo's
caption appended as ``[shares a photo: …]``). The ``-named`` views write the
speaker into the text as well (``"James: …"``, the convention of mem0's
evaluation) to show what the name in the text is worth. Sessions are captured
in order with the session's date, each session ended, the pipeline run,
everything embedded; then ``Store.recall(user, question,
session_id=<a new session>)`` as a host calls it.

An evidence turn *reached the agent* when its id is an injected message's
``message_id`` or among an injected memory's ``source_message_ids``, or when
its own words (first 80 characters, whitespace and case folded) are in
``Recall.text``. Per question: *coverage* is the share of its evidence turns
that reached the agent, *hit* whether any did; categories 1-4 (5 has no
evidence). *Off-topic*: the share of questions no conversation answers
(``data/off_topic.json``, several kinds, two halves) for which recall injected
any memory other than a standing instruction, or any excerpt. *Characters*:
``len(Recall.text)``, stable and per-turn parts together.

Two rows per view. ``default``: the shipped gate. ``cross-validated``: the
gate threshold is chosen on half of the conversations (the highest coverage
whose off-topic rate on the calibration half stays within
``OFF_TOPIC_TARGET``, else the lowest off-topic rate) and the figures are
reported on the other half, with the held-out off-topic half; then the halves
swap, so every conversation is reported under a threshold it did not choose.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from tqdm import tqdm

from memstore.bench.datasets import load_bench_data
from memstore.bench.locomo_data import Conversation, Turn
from memstore.bench.metrics import mean, percentile
from memstore.recall import compose as rc
from memstore.recall.rank import collect, rescore
from memstore.store import Store

VIEWS = ("agent", "group", "agent-named", "group-named")
CATEGORIES = (1, 2, 3, 4)
SWEEP = (0.6, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.6, 1.8, 2.0, 2.3)
AGREES = (0.0, 0.25, 0.5, 0.75, 1.0)  # weights of word coverage next to the vector margin
Gate = tuple[float, float]  # (agree weight, threshold)
OFF_TOPIC_TARGET = 0.10
WORDS_CHARS = 80
ASK_SESSION = "bench-question"
_IMAGE = re.compile(r"\s*\[image: [^\]]*\]$")


def off_topic_questions() -> dict[str, list[tuple[str, str]]]:
    """``{"calibration": [(kind, question), ...], "held_out": [...]}``."""
    raw = json.loads(
        resources.files("memstore.bench").joinpath("data/off_topic.json").read_text("utf-8")
    )
    out: dict[str, list[tuple[str, str]]] = {"calibration": [], "held_out": []}
    for kind, qs in raw["kinds"].items():
        for i, q in enumerate(qs):
            out["calibration" if i % 2 == 0 else "held_out"].append((kind, q))
    return out


def view_text(t: Turn, named: bool) -> str:
    """The turn's words, a photo's caption as ``[shares a photo: …]``."""
    body = _IMAGE.sub("", t.text) if t.image_caption else t.text
    if t.image_caption:
        body = f"{body} [shares a photo: {t.image_caption}]".strip()
    return f"{t.speaker}: {body}" if named else body


def fold(s: str) -> str:
    return " ".join(s.split()).casefold()


def capture_view(conv: Conversation, store: Store, view: str) -> None:
    group, named = view.startswith("group"), view.endswith("-named")
    user = conv.sample_id
    sessions: dict[int, list[dict[str, Any]]] = {}
    for t in conv.turns:
        role = "user" if group or t.speaker == conv.speaker_a else "assistant"
        sessions.setdefault(t.session_index, []).append(
            {
                "role": role,
                "content": view_text(t, named),
                "name": t.speaker,
                "timestamp": t.occurred_at,
                "id": t.dia_id,
            }
        )
    for n, msgs in sorted(sessions.items()):
        store.capture(user, f"session_{n}", msgs)
        store.end_session(user, f"session_{n}", timeout_s=600)
    store.run_pipeline(user)
    store.reindex()


def open_view_store(
    conv: Conversation, view: str, embedder: str, cache: Path, vector_element: str | None = None
) -> Store:
    """The conversation's store in ``view`` (built once per cache); with
    ``vector_element``, its vectors stored so (converted if built otherwise)."""
    from memstore.bench.locomo_index import locomo_settings, match_element
    from memstore.bench.locomo_recall import conv_digest, seed_embedding_cache

    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{conv.sample_id}-view-{view}-{conv_digest(conv, embedder)}.db"
    done = path.with_suffix(".complete")
    settings = locomo_settings(embedder, vector_element)
    if done.exists():
        store = Store.open(path, settings=settings)
        match_element(store, vector_element)
        return store
    for leftover in cache.glob(path.name + "*"):
        leftover.unlink()
    store = Store.open(path, settings=settings)
    # Views of one conversation share their texts: reuse the vectors.
    for sib in sorted(cache.glob(f"{conv.sample_id}-view-*.complete")):
        seed_embedding_cache(store, sib.with_suffix(".db"))
    capture_view(conv, store, view)
    done.write_text("built\n")
    match_element(store, vector_element)
    return store


@dataclass
class Outcome:
    """One question under one gate: what reached the agent, at what cost."""

    coverage: float
    hit: float
    chars: int
    per_turn_chars: int
    injected: bool


def outcome(
    text: str,
    per_turn: str,
    memories: Sequence[rc.RecalledMemory],
    messages: Sequence[rc.RecalledMessage],
    evidence: Sequence[str],
    words: dict[str, str],
) -> Outcome:
    ids = {m.message_id for m in messages}
    for mem in memories:
        ids.update(mem.source_message_ids)
    folded = fold(text)
    ev = set(evidence)
    reached = {e for e in ev if e in ids or (e in words and words[e] in folded)}
    injected = any(not m.standing for m in memories) or bool(messages)
    return Outcome(
        coverage=len(reached) / len(ev) if ev else float("nan"),
        hit=1.0 if reached else 0.0,
        chars=len(text),
        per_turn_chars=len(per_turn),
        injected=injected,
    )


@dataclass
class ConvResult:
    """Per conversation and view: each question's outcome, shipped and per threshold."""

    sample_id: str
    questions: list[tuple[int, Outcome, dict[Gate, Outcome]]] = field(default_factory=list)
    off_topic: list[tuple[str, str, Outcome, dict[Gate, Outcome]]] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)


def run_view_conversation(
    conv: Conversation,
    store: Store,
    view: str,
    progress: bool,
    categories: Sequence[int] = CATEGORIES,
) -> ConvResult:
    from memstore.bench.locomo_index import scored_questions

    user = conv.sample_id
    words = {t.dia_id: fold(view_text(t, False))[:WORDS_CHARS] for t in conv.turns}
    budget = store.settings.recall.budget_chars
    stable = rc.stable_part(store.internals.derivation, user, int(budget * rc.STABLE_SHARE))
    room = budget - len(stable.text) - (1 if stable.text else 0)
    skip = {m.memory_id for m in stable.instructions}
    out = ConvResult(user)
    asks: list[tuple[str, Any, Any, list[str]]] = [
        (q.question, q.category, None, q.evidence) for q in scored_questions(conv, categories)
    ]
    for half, qs in off_topic_questions().items():
        asks += [(q, half, kind, []) for kind, q in qs]
    for question, cat, kind, evidence in tqdm(
        asks, desc=f"{view} {user}", disable=not progress, leave=False
    ):
        t0 = time.perf_counter()
        r = store.recall(user, question, session_id=ASK_SESSION)
        out.ms.append((time.perf_counter() - t0) * 1000)
        shipped = outcome(r.text, r.per_turn, r.memories, r.messages, evidence, words)
        cands = collect(store.internals.derivation, question, user, ASK_SESSION, skip)
        swept: dict[Gate, Outcome] = {}
        for agree in AGREES:
            cands = rescore(cands, agree)
            for thr in SWEEP:
                per_turn, mems, msgs, _, _ = rc.per_turn_part(
                    store.internals.derivation, question, cands, room, thr
                )
                text = "\n".join(x for x in (stable.text, per_turn) if x)
                swept[agree, thr] = outcome(
                    text, per_turn, [*stable.instructions, *mems], msgs, evidence, words
                )
        if isinstance(cat, int):
            out.questions.append((cat, shipped, swept))
        else:
            out.off_topic.append((cat, kind, shipped, swept))
    return out


def summarise(
    results: Sequence[ConvResult], pick: Callable[[Any], Outcome], half: str | None
) -> dict[str, Any]:
    """Figures over ``results``; ``pick`` chooses the outcome of a question
    (shipped, or under one threshold); ``half``: the off-topic half counted
    (None: both)."""
    rows = [(cat, pick(rest)) for r in results for cat, *rest in r.questions]
    offs = [
        (kind, pick(rest))
        for r in results
        for h, kind, *rest in r.off_topic
        if half is None or h == half
    ]

    def agg(sel: Sequence[Outcome]) -> dict[str, float]:
        return {
            "coverage": mean(o.coverage for o in sel),
            "hit": mean(o.hit for o in sel),
            "n": float(len(sel)),
        }

    kinds = sorted({k for k, _ in offs})
    return {
        "overall": agg([o for _, o in rows]),
        "per_category": {
            str(c): agg([o for k, o in rows if k == c]) for c in sorted({k for k, _ in rows})
        },
        "chars": mean(float(o.chars) for _, o in rows),
        "per_turn_chars": mean(float(o.per_turn_chars) for _, o in rows),
        "off_topic": mean(1.0 if o.injected else 0.0 for _, o in offs),
        "off_topic_by_kind": {
            k: mean(1.0 if o.injected else 0.0 for kk, o in offs if kk == k) for k in kinds
        },
    }


def _shipped(rest: Any) -> Outcome:
    shipped: Outcome = rest[0]
    return shipped


def choose_gate(results: Sequence[ConvResult]) -> Gate:
    """The highest coverage within the off-topic target on the calibration
    half, else the lowest off-topic rate (ties: the higher threshold)."""
    scored = []
    for gate in ((a, t) for a in AGREES for t in SWEEP):

        def under(rest: Any, g: Gate = gate) -> Outcome:
            got: Outcome = rest[1][g]
            return got

        s = summarise(results, under, "calibration")
        scored.append((gate, s["overall"]["coverage"], s["off_topic"]))
    ok = [x for x in scored if x[2] <= OFF_TOPIC_TARGET]
    if ok:
        return max(ok, key=lambda x: (x[1], x[0][1]))[0]
    return min(scored, key=lambda x: (x[2], -x[0][1]))[0]


def cross_validate(results: Sequence[ConvResult]) -> dict[str, Any]:
    """Choose on one half of the conversations, report on the other, swap."""
    folds = [list(results[0::2]), list(results[1::2])]
    if not folds[1]:  # one conversation: nothing to hold out
        return {}
    chosen: dict[str, Gate] = {}
    reported: list[tuple[ConvResult, Gate]] = []
    for fit, test in ((folds[0], folds[1]), (folds[1], folds[0])):
        thr = choose_gate(fit)
        for r in test:
            chosen[r.sample_id] = thr
            reported.append((r, thr))
    # Each conversation's questions under the threshold chosen without it.
    remapped = [
        ConvResult(
            r.sample_id,
            [(c, swept[thr], swept) for c, _, swept in r.questions],
            [(h, k, swept[thr], swept) for h, k, _, swept in r.off_topic],
        )
        for r, thr in reported
    ]
    return {"thresholds": chosen} | summarise(remapped, lambda rest: rest[0], "held_out")


def run_views_bench(
    path: str | Path,
    *,
    embedder: str = "e5",
    views: Sequence[str] = VIEWS,
    dataset: str = "auto",
    hosts: str | Path | None = None,
    limit_conversations: int | None = None,
    cache: Path | None = None,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
    progress: bool = True,
    vector_element: str | None = None,
) -> dict[str, Any]:
    import tempfile

    from memstore.config import Settings

    data = load_bench_data(path, dataset, hosts)
    convs = data.conversations[:limit_conversations]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        where = cache if cache is not None else Path(tmp)
        for view in views:
            results: list[ConvResult] = []
            for conv in convs:
                t0 = time.perf_counter()
                store = open_view_store(conv, view, embedder, where, vector_element)
                try:
                    log(f"{view} {conv.sample_id}: store ready in {time.perf_counter() - t0:.1f} s")
                    results.append(
                        run_view_conversation(conv, store, view, progress, list(data.categories))
                    )
                finally:
                    store.close()
            halves = {
                f"off_topic_{h}": summarise(results, _shipped, h)["off_topic"]
                for h in ("calibration", "held_out")
            }
            out[view] = {
                "default": summarise(results, _shipped, None) | halves,
                "cross_validated": cross_validate(results),
                "latency_ms_p50": percentile([x for r in results for x in r.ms], 50),
            }
    return {
        "dataset": str(path),
        "format": data.dataset,
        "categories": {str(c): name for c, name in data.categories.items()},
        "conversations": [c.sample_id for c in convs],
        "embedder": embedder,
        "budget_chars": Settings().recall.budget_chars,
        "threshold": Settings().recall.threshold,
        "views": out,
    }


def format_views_bench(res: dict[str, Any]) -> str:
    # Results written before other data sets were supported carry no categories.
    cats = list(res.get("categories") or {str(c): "" for c in CATEGORIES})
    fmt = res.get("format", "locomo")
    lines = [
        f"recall on {fmt} by view {res['dataset']}: {len(res['conversations'])} conversations, "
        f"embedder {res['embedder']}, budget {res['budget_chars']}, gate {res['threshold']}",
        f"{'view / gate':<28}{'cover':>7}{'hit':>7}"
        + "".join(f"{'cov c' + c:>8}" for c in cats)
        + f"{'off-top':>9}{'chars':>7}{'turn ch':>8}",
    ]
    for view, v in res["views"].items():
        for name in ("default", "cross_validated"):
            s = v.get(name) or {}
            if not s:
                continue
            o = s["overall"]
            lines.append(
                f"{view + ' / ' + name:<28}{o['coverage']:>7.3f}{o['hit']:>7.3f}"
                + "".join(
                    f"{s['per_category'].get(c, {}).get('coverage', math.nan):>8.3f}" for c in cats
                )
                + f"{s['off_topic']:>9.3f}{s['chars']:>7.0f}{s['per_turn_chars']:>8.0f}"
            )
        cv = v.get("cross_validated") or {}
        if cv:
            lines.append(
                "  gate (agree weight, threshold) chosen per held-out conversation: "
                + ", ".join(f"{k} {tuple(g)}" for k, g in cv["thresholds"].items())
            )
        d = v["default"]
        lines.append(
            f"  default gate off-topic: calibration {d['off_topic_calibration']:.3f}, held-out "
            f"{d['off_topic_held_out']:.3f}; by kind "
            + ", ".join(f"{k} {x:.2f}" for k, x in d["off_topic_by_kind"].items())
        )
    lines.append(
        "  cover = share of a question's evidence turns that reached the agent (id or its first "
        "80 characters in the text), averaged; hit = at least one did; off-top = off-topic "
        "questions injecting anything (default: both halves; cross-validated: held-out half); "
        "chars = len(Recall.text), stable + per-turn"
    )
    if res.get("categories") and fmt != "locomo":
        lines.append(
            "  categories: " + ", ".join(f"c{c} {n}" for c, n in res["categories"].items())
        )
    return "\n".join(lines)
