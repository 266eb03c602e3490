"""What recall injects, on LoCoMo (``memstore bench locomo --recall``).

For each question, ``Store.recall(user, question)`` is called as a
host calls it (default budget, offline defaults), and the injected parts are
scored against the question's evidence turns:

- ``hit``: at least one evidence turn reached the agent — as an injected
  message (``RecalledMessage.message_id``, neighbours included) or as the
  source of an injected memory (``RecalledMemory.source_message_ids``);
- ``evidence_recall``: the share of evidence turns that reached it;
- ``verbatim``: an evidence turn's own words are in ``Recall.text`` (its
  whole text, or 60 consecutive characters of it when it was clipped);
- characters used (``text`` and the per-turn part).

The off-topic figure is the share of general questions (``OFF_TOPIC``: a
fixed list, none answered by any conversation) whose recall injects any
memory or excerpt, in two halves (``CALIBRATION``, ``HELD_OUT``). The
gate's defaults are chosen with the views bench (``locomo_views``), which
stores the speaker as data and asks a wider off-topic list; this one runs
with ``--chatlike`` or ``--peers``.

Per conversation the store is built as the layer bench builds it (every
turn captured, speaker A as the user; the conversation again with speaker B
as the user, so the offline deriver sees both people's first-person
statements; every session ended, the pipeline run, everything embedded) and
recall asks as speaker A's host. Stores can be kept in a cache directory
between runs (embedding LoCoMo with e5 takes minutes).

The gate sweep re-spends the same scored candidates (``recall.collect``)
under each threshold with the very ``per_turn_part`` recall uses, which
gives the coverage / off-topic trade-off curve from one search per question.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

from tqdm import tqdm

from memstore.bench.locomo_chatlike import is_filler_id
from memstore.bench.locomo_data import Conversation, load_locomo
from memstore.bench.metrics import mean, percentile, recall_at_k
from memstore.recall import compose as rc
from memstore.recall.rank import collect
from memstore.store import Store

CALIBRATION = (
    "What is the capital of Australia?",
    "Write a haiku about the sea.",
    "How do I reverse a list in Python?",
    "What is the boiling point of water at sea level in Fahrenheit?",
    "Explain quantum entanglement in simple terms.",
    "Translate 'good morning' into Japanese.",
    "What is 17 times 23?",
    "Who wrote Pride and Prejudice?",
    "How many bones are in the adult human body?",
    "Convert 10 kilometres to miles.",
    "What does HTTP status code 404 mean?",
    "Summarise the causes of the First World War.",
    "What is the difference between a virus and a bacterium?",
    "Give me a regular expression that matches an email address.",
    "What year did the Berlin Wall fall?",
    "How does a refrigerator keep food cold?",
    "What is the square root of 144?",
    "Write a SQL query that counts rows per customer.",
    "Which planet has the most moons?",
    "What is the chemical symbol for gold?",
)
HELD_OUT = (
    "What is the tallest mountain in Africa?",
    "Write a limerick about a cat who loves cheese.",
    "How do I undo the last commit in git?",
    "What is the speed of light in a vacuum?",
    "Explain how compound interest works.",
    "Translate 'thank you very much' into German.",
    "What is the derivative of x squared?",
    "Who painted the Mona Lisa?",
    "How many continents are there?",
    "How many ounces are in a pound?",
    "What is a linked list?",
    "Summarise the plot of Hamlet in three sentences.",
    "What causes the seasons on Earth?",
    "How do I centre a div in CSS?",
    "When was the printing press invented?",
    "Why is the sky blue?",
    "What is the largest prime number below 100?",
    "Write a bash one-liner that counts lines in all .txt files.",
    "What is the longest river in South America?",
    "What is photosynthesis?",
)
OFF_TOPIC = CALIBRATION + HELD_OUT
CATEGORIES = (1, 2, 3, 4)
SWEEP = (0.0, 0.4, 0.6, 0.7, 0.8, 0.85, 0.9, 1.0, 1.1, 1.2, 1.4)
VERBATIM_CHARS = 60


def verbatim(turn_text: str, injected: str) -> bool:
    """The turn's words are in the injected text: whole, or a long run of them."""
    if turn_text in injected:
        return True
    need = min(VERBATIM_CHARS, len(turn_text))
    m = SequenceMatcher(None, turn_text, injected, autojunk=False).find_longest_match()
    return m.size >= need


def score_question(
    ids: set[str], text: str, evidence: Sequence[str], texts: dict[str, str]
) -> dict[str, float]:
    ev = set(evidence)
    got = ids & ev
    return {
        "hit": 1.0 if got else 0.0,
        "evidence_recall": len(got) / len(ev) if ev else float("nan"),
        "verbatim": 1.0 if any(verbatim(texts[e], text) for e in ev if e in texts) else 0.0,
    }


@dataclass
class RecallScores:
    rows: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    chars: list[float] = field(default_factory=list)
    per_turn_chars: list[float] = field(default_factory=list)
    off_topic: dict[str, list[float]] = field(default_factory=dict)  # half → injected 0/1
    ms: list[float] = field(default_factory=list)
    search_r10: list[float] = field(default_factory=list)  # hybrid search on the same store
    filler_top3: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        keys = ("hit", "evidence_recall", "verbatim")

        def agg(rows: list[dict[str, float]]) -> dict[str, float]:
            return {k: mean(r[k] for r in rows) for k in keys} | {"n": float(len(rows))}

        return {
            "overall": agg([m for _, m in self.rows]),
            "per_category": {
                str(c): agg([m for cat, m in self.rows if cat == c]) for c in CATEGORIES
            },
            "chars": {"mean": mean(self.chars), "p95": percentile(self.chars, 95)},
            "per_turn_chars": {
                "mean": mean(self.per_turn_chars),
                "p95": percentile(self.per_turn_chars, 95),
            },
            "off_topic_injected": {k: mean(v) for k, v in self.off_topic.items()}
            | {"all": mean([x for v in self.off_topic.values() for x in v])},
            "latency_ms": {"p50": percentile(self.ms, 50), "p95": percentile(self.ms, 95)}
            if self.ms
            else {},
            **(
                {
                    "search_recall@10": mean(self.search_r10),
                    "search_filler_top3": mean(self.filler_top3),
                }
                if self.search_r10
                else {}
            ),
        }


def conv_digest(conv: Conversation, embedder: str) -> str:
    h = hashlib.sha256(embedder.encode())
    for t in conv.turns:
        h.update(f"{t.dia_id}\x00{t.speaker}\x00{t.text}\x00{t.occurred_at}\x01".encode())
    return h.hexdigest()[:12]


def build_store(
    conv: Conversation, path: Path, embedder: str, siblings: Sequence[Path] = ()
) -> Store:
    """Capture both perspectives, derive, embed (see the module docstring).
    ``siblings``: other stores built from the same conversation, whose
    embedding cache is copied first, so a text they embedded is not embedded
    again (same model, same content hash: the same vector)."""
    from memstore.bench.layers import B_SUFFIX, capture_as_b, derive_all
    from memstore.bench.locomo_index import ingest, locomo_settings

    store = Store.open(path, settings=locomo_settings(embedder))
    for sib in siblings:
        seed_embedding_cache(store, sib)
    ingest(conv, store)
    capture_as_b(conv, store)
    derive_all(conv, store, [conv.sample_id, conv.sample_id + B_SUFFIX])
    store.reindex()
    return store


def seed_embedding_cache(store: Store, other: Path) -> int:
    """Hand ``other``'s stored vectors to ``store`` as cache rows (existing rows
    win): the indexer takes a vector from the cache when the (model, content
    hash) matches, so texts both stores hold are not embedded again."""
    from sqlalchemy import text as sql

    from memstore.db.backend import upsert
    from memstore.db.elements import decode
    from memstore.db.engine import SqliteDatabase
    from memstore.db.schema import embedding_cache

    rows: list[dict[str, Any]] = []
    src = SqliteDatabase(other)
    try:
        with src.read() as conn:
            spaces = conn.execute(
                sql("SELECT name, model_id, dims, table_name, element FROM vector_spaces")
            ).all()
            for name, model_id, dims, table, element in spaces:
                found = conn.execute(
                    sql(
                        f"SELECT vi.content_hash, v.embedding FROM vector_index vi "
                        f'JOIN "{table}" v ON v.rowid = vi.source_id WHERE vi.space = :s'
                    ),
                    {"s": name},
                ).all()
                # The cache holds float32 (an int8 space's vectors at unit length).
                rows += [
                    {
                        "model_id": model_id,
                        "content_hash": h,
                        "dims": dims,
                        "vector": decode(bytes(blob), element, dims),
                    }
                    for h, blob in found
                ]
    finally:
        src.close()
    if rows:
        with store.internals.db.write() as conn:
            conn.execute(upsert(embedding_cache).on_conflict_do_nothing(), rows)
    return len(rows)


def open_store(conv: Conversation, embedder: str, cache: Path, label: str) -> Store:
    from memstore.bench.locomo_index import locomo_settings

    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{conv.sample_id}-{label}-{conv_digest(conv, embedder)}.db"
    done = path.with_suffix(".complete")
    if done.exists():
        return Store.open(path, settings=locomo_settings(embedder))
    for leftover in cache.glob(path.name + "*"):
        leftover.unlink()
    # The clean and chat-like stores of a conversation share most texts.
    siblings = [p.with_suffix(".db") for p in sorted(cache.glob(f"{conv.sample_id}-*.complete"))]
    store = build_store(conv, path, embedder, siblings)
    done.write_text("built\n")
    return store


def run_conversation(
    conv: Conversation,
    store: Store,
    main: RecallScores,
    sweep: dict[float, RecallScores],
    progress: bool,
) -> None:
    from memstore.bench.locomo_index import scored_questions, turn_text

    user = conv.sample_id
    texts = {t.dia_id: turn_text(t.speaker, t.text) for t in conv.turns}
    budget = store.settings.recall.budget_chars
    stable = rc.stable_part(store.internals.derivation, user, int(budget * rc.STABLE_SHARE))
    room = budget - len(stable.text) - (1 if stable.text else 0)
    asks: list[tuple[str, int | str, list[str]]] = [
        (q.question, q.category, q.evidence) for q in scored_questions(conv)
    ]
    asks += [(q, "calibration", []) for q in CALIBRATION]
    asks += [(q, "held_out", []) for q in HELD_OUT]
    for question, cat, evidence in tqdm(
        asks, desc=f"recall {user}", disable=not progress, leave=False
    ):
        store.internals.search_engine.queries.cache.clear()  # time the query embedding
        t0 = time.perf_counter()
        r = store.recall(user, question)
        main.ms.append((time.perf_counter() - t0) * 1000)
        _add(main, r.per_turn, r.text, r.memories, r.messages, cat, evidence, texts)
        if evidence:  # plain retrieval on the same store, next to what recall made of it
            refs = [h.ref for h in store.search_conversations(user, question, limit=10)]
            main.search_r10.append(recall_at_k(refs, evidence, 10))
            main.filler_top3.append(1.0 if any(map(is_filler_id, refs[:3])) else 0.0)
        # The sweep: the same candidates, re-spent under each threshold.
        skip = {m.memory_id for m in stable.instructions}
        cands = collect(store.internals.derivation, question, user, None, skip)
        for thr, acc in sweep.items():
            per_turn, mems, msgs, _, _ = rc.per_turn_part(
                store.internals.derivation, question, cands, room, thr
            )
            text = "\n".join(x for x in (stable.text, per_turn) if x)
            _add(acc, per_turn, text, [*stable.instructions, *mems], msgs, cat, evidence, texts)


def _add(
    acc: RecallScores,
    per_turn: str,
    text: str,
    memories: Sequence[rc.RecalledMemory],
    messages: Sequence[rc.RecalledMessage],
    cat: int | str,
    evidence: Sequence[str],
    texts: dict[str, str],
) -> None:
    ids = {m.message_id for m in messages}
    for mem in memories:
        ids.update(mem.source_message_ids)
    injected = any(not m.standing for m in memories) or bool(messages)
    _add_raw(acc, per_turn, text, ids, injected, cat, evidence, texts)


def _add_raw(
    acc: RecallScores,
    per_turn: str,
    text: str,
    ids: set[str],
    injected: bool,
    cat: int | str,
    evidence: Sequence[str],
    texts: dict[str, str],
) -> None:
    """One question's outcome: an off-topic one (``cat`` names its half)
    counts whether anything per-turn was injected; a LoCoMo one is scored."""
    if isinstance(cat, str):
        acc.off_topic.setdefault(cat, []).append(1.0 if injected else 0.0)
        return
    acc.rows.append((cat, score_question(ids, text, evidence, texts)))
    acc.chars.append(float(len(text)))
    acc.per_turn_chars.append(float(len(per_turn)))


def run_recall_bench(
    path: str | Path,
    *,
    embedder: str = "e5",
    limit_conversations: int | None = None,
    chatlike: bool = False,
    peers: Sequence[str] = (),
    cache: Path | None = None,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
    progress: bool = True,
) -> dict[str, Any]:
    import tempfile

    convs = load_locomo(path)[:limit_conversations]
    label = "clean"
    if chatlike:
        from memstore.bench.locomo_chatlike import make_chatlike

        convs = make_chatlike(convs)
        label = "chatlike"
    main = RecallScores()
    sweep = {t: RecallScores() for t in SWEEP}
    peer_out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        where = cache if cache is not None else Path(tmp)
        for conv in convs:
            t0 = time.perf_counter()
            store = open_store(conv, embedder, where, label)
            try:
                log(f"{conv.sample_id}: store ready in {time.perf_counter() - t0:.1f} s")
                run_conversation(conv, store, main, sweep, progress)
            finally:
                store.close()
        if "holographic" in peers:
            from memstore.bench.locomo_recall_holo import run_holographic_prefetch

            peer_out["holographic"] = run_holographic_prefetch(
                convs,
                CALIBRATION + HELD_OUT,
                CALIBRATION,
                RecallScores(),
                _add_raw,
                log=log,
                progress=progress,
            )
    from memstore.config import Settings

    return {
        "dataset": str(path),
        "variant": label,
        "conversations": len(convs),
        "embedder": embedder,
        "budget_chars": Settings().recall.budget_chars,
        "threshold": Settings().recall.threshold,
        "recall": main.summary(),
        "sweep": {str(t): acc.summary() for t, acc in sweep.items()},
        "peers": peer_out,
    }


def format_recall_bench(res: dict[str, Any]) -> str:
    r = res["recall"]
    o = r["overall"]
    lines = [
        f"recall on LoCoMo ({res['variant']}) {res['dataset']}: {res['conversations']} "
        f"conversations, {int(o['n'])} questions, embedder {res['embedder']}, "
        f"budget {res['budget_chars']}, gate {res['threshold']}",
        f"{'system':<22}{'hit':>7}{'ev.rec':>8}{'verb.':>7}{'chars':>8}{'turn ch':>9}"
        f"{'off-top':>9}" + "".join(f"{'hit c' + str(c):>8}" for c in CATEGORIES),
        _row("memstore recall", r),
    ]
    for name, peer in res.get("peers", {}).items():
        if peer.get("error"):
            lines.append(f"{name:<22}not run: {peer['error']}")
        else:
            lines.append(_row(f"{name} prefetch", peer))
    lat = r.get("latency_ms") or {}
    if lat:
        lines.append(
            f"recall latency incl. query embedding: p50 {lat['p50']:.1f} / p95 {lat['p95']:.1f} ms"
        )
    if "search_recall@10" in r:
        lines.append(
            f"hybrid search on the same stores: recall@10 {r['search_recall@10']:.3f}, "
            f"questions with a filler reply in the top 3 {r['search_filler_top3']:.1%}"
        )
    off = r["off_topic_injected"]
    lines.append(
        f"off-topic injected: calibration half {off.get('calibration', float('nan')):.3f}, "
        f"held-out half {off.get('held_out', float('nan')):.3f}"
    )
    lines += [
        "",
        "gate sweep (same candidates, re-spent per threshold)",
        f"{'threshold':>10}{'hit':>7}{'ev.rec':>8}{'verb.':>7}{'turn ch':>9}"
        f"{'off cal':>9}{'off held':>9}",
    ]
    for t, s in res["sweep"].items():
        so, off = s["overall"], s["off_topic_injected"]
        lines.append(
            f"{float(t):>10.2f}{so['hit']:>7.3f}{so['evidence_recall']:>8.3f}"
            f"{so['verbatim']:>7.3f}{s['per_turn_chars']['mean']:>9.0f}"
            f"{off.get('calibration', float('nan')):>9.3f}{off.get('held_out', float('nan')):>9.3f}"
        )
    lines.append(
        "  hit = an evidence turn reached the agent (excerpt or memory source); ev.rec = share "
        "of evidence turns; verb. = an evidence turn's words in the text; chars = mean "
        "characters injected (turn ch: per-turn part only); off-top = share of off-topic "
        "questions injecting anything"
    )
    return "\n".join(lines)


def _row(name: str, r: dict[str, Any]) -> str:
    o = r["overall"]
    return (
        f"{name:<22}{o['hit']:>7.3f}{o['evidence_recall']:>8.3f}{o['verbatim']:>7.3f}"
        f"{r['chars']['mean']:>8.0f}{r['per_turn_chars']['mean']:>9.0f}"
        f"{r['off_topic_injected']['all']:>9.3f}"
        + "".join(f"{r['per_category'][str(c)]['hit']:>8.3f}" for c in CATEGORIES)
    )
