"""End-to-end answers on LoCoMo (``memstore bench locomo --qa``).

Retrieval figures say whether the evidence reached the model; this bench
says whether the model then answered right. For each scored question
(categories 1-4) a chat model answers from one *context* alone, and a judge
model grades the answer against LoCoMo's gold answer. The contexts, on the
same model and the same questions:

- ``memstore``: ``Store.recall(user, question).text`` — what a host injects;
- ``holographic``: Hermes' holographic provider's ``prefetch`` (when
  hermes-agent is installed), every turn added through its fact store;
- ``none``: no memory at all (the floor);
- ``full``: the whole conversation, every session with its date (the
  long-context ceiling, at its cost in tokens).

The grading follows the protocol the mem0 and Zep papers used for LoCoMo (the
"J" score): the judge sees the question, the gold answer and the generated
answer, is told to be generous about wording and length but strict about the
fact (a date in another format or a relative date that resolves to the same
day is right; another person, place, object or time is wrong), and answers
JSON with a label ``CORRECT`` or ``WRONG``. Accuracy is the share of
``CORRECT``. Both prompts are below, versioned; the report carries their
versions, the models, the prompt and completion tokens per question, and the
latencies of building the context and of the answer call.

The memstore store of a conversation is captured the way hosts capture it
(the "agent view"): the first speaker as the user, the second as the
assistant, each message's speaker as its ``name`` and never in its text,
one session per LoCoMo session (``locomo_views.capture_view``, the recall
bench's agent view); every session is ended, the pipeline run, everything
embedded.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstore.bench.datasets import load_bench_data
from memstore.bench.locomo_data import Conversation, Question
from memstore.bench.locomo_views import capture_view, view_text
from memstore.bench.metrics import mean, percentile
from memstore.errors import InvalidInputError

ANSWER_PROMPT_VERSION = "qa-answer-1"
JUDGE_PROMPT_VERSION = "qa-judge-1"
CONTEXTS = ("memstore", "holographic", "none", "full")
CATEGORIES = (1, 2, 3, 4)

ANSWER_SYSTEM = (
    "You are an assistant with a long-term memory of earlier conversations. "
    "Answer the question using only the memory context you are given. Dates in "
    'the context are when things were said; resolve relative times ("last '
    'week", "yesterday") against them and answer with the actual date or '
    "period. Answer in a short phrase of at most a dozen words, with no "
    "explanation. If the context does not contain the answer, say you don't know."
)

JUDGE_SYSTEM = (
    "You grade answers to questions about a conversation. You get the question, "
    "the gold answer and a generated answer. Label the generated answer CORRECT "
    "when it states the same fact as the gold answer: be generous about wording, "
    "extra detail and length, and accept a date or period written another way, "
    "or a relative date that resolves to the same day, month or year. Label it "
    "WRONG when it names another person, place, object, quantity or time, when "
    "it contradicts the gold answer, or when it says it does not know. Reply with "
    'JSON only: {"reasoning": "<one sentence>", "label": "CORRECT" or "WRONG"}.'
)

_LABEL = re.compile(r"\b(CORRECT|WRONG)\b")


def answer_messages(context: str, question: str) -> list[dict[str, str]]:
    memory = context.strip() or "(no memory)"
    return [
        {"role": "system", "content": ANSWER_SYSTEM},
        {"role": "user", "content": f"Memory context:\n{memory}\n\nQuestion: {question}"},
    ]


def judge_messages(question: str, gold: str, answer: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {
            "role": "user",
            "content": f"Question: {question}\nGold answer: {gold}\nGenerated answer: {answer}",
        },
    ]


def parse_label(reply: str) -> str | None:
    """``CORRECT``/``WRONG`` from a judge's reply: its JSON ``label``, else the
    last label word in the text; None when it gives neither."""
    text = reply.strip()
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            data = json.loads(text[start : end + 1])
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            label = str(data.get("label", "")).strip().upper()
            if label in ("CORRECT", "WRONG"):
                return label
    found = _LABEL.findall(text.upper())
    return found[-1] if found else None


@dataclass
class Chat:
    """One OpenAI-compatible endpoint and model, through the ``openai`` client."""

    base_url: str
    model: str
    api_key: str = "x"
    timeout_s: float = 120.0
    max_tokens: int = 200
    _client: Any = None

    def complete(self, messages: list[dict[str, str]]) -> tuple[str, int, int, float]:
        """The reply, prompt and completion tokens (0 when the server reports
        none), and the call's wall time in ms."""
        if self._client is None:
            import openai

            self._client = openai.OpenAI(
                base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s
            )
        t0 = time.perf_counter()
        resp = self._client.chat.completions.create(
            model=self.model, messages=messages, temperature=0, max_tokens=self.max_tokens
        )
        ms = (time.perf_counter() - t0) * 1000
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        usage = resp.usage
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0) if usage else 0
        completion = int(getattr(usage, "completion_tokens", 0) or 0) if usage else 0
        return text.strip(), prompt, completion, ms


@dataclass
class ContextScores:
    rows: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        def acc(rows: list[dict[str, Any]]) -> dict[str, float]:
            graded = [r for r in rows if r["label"] is not None]
            return {
                "accuracy": mean(1.0 if r["label"] == "CORRECT" else 0.0 for r in graded),
                "n": float(len(rows)),
                "ungraded": float(len(rows) - len(graded)),
            }

        rows = self.rows
        return {
            "overall": acc(rows),
            "per_category": {
                str(c): acc([r for r in rows if r["category"] == c])
                for c in sorted({r["category"] for r in rows})
            },
            "prompt_tokens": mean(r["prompt_tokens"] for r in rows),
            "completion_tokens": mean(r["completion_tokens"] for r in rows),
            "context_chars": mean(r["context_chars"] for r in rows),
            "context_ms": {
                "p50": percentile([r["context_ms"] for r in rows], 50),
                "p95": percentile([r["context_ms"] for r in rows], 95),
            },
            "answer_ms": {
                "p50": percentile([r["answer_ms"] for r in rows], 50),
                "p95": percentile([r["answer_ms"] for r in rows], 95),
            },
        }


# A context, opened for one conversation: question -> the text the model gets.
ContextFn = Callable[[str], str]


def transcript(conv: Conversation) -> str:
    """The whole conversation for the ``full`` context: sessions in order, each
    headed by its date, one ``Speaker: text`` line per turn."""
    lines: list[str] = []
    current = None
    for t in conv.turns:
        if t.session_index != current:
            current = t.session_index
            lines.append(f"\n[session {current}, {t.occurred_at:%Y-%m-%d %H:%M}]")
        lines.append(f"{t.speaker}: {view_text(t, named=False)}")
    return "\n".join(lines).strip()


@contextmanager
def memstore_context(conv: Conversation, embedder: str, where: Path) -> Iterator[ContextFn]:
    from memstore import Settings, Store

    settings = Settings().replace(embedder=embedder, background_indexer=False, scheduler=False)
    user = conv.sample_id
    path = where / f"{conv.sample_id}-qa-{embedder}.db"
    for leftover in where.glob(path.name + "*"):
        leftover.unlink()
    store = Store.open(path, settings=settings)
    try:
        capture_view(conv, store, "agent")  # as the recall bench's agent view
        yield lambda q: store.recall(user, q, session_id="qa-question").text
    finally:
        store.close()


@contextmanager
def holographic_context(conv: Conversation, where: Path) -> Iterator[ContextFn]:
    import importlib
    import json as _json
    import os

    cls = importlib.import_module("plugins.memory.holographic").HolographicMemoryProvider
    old_home = os.environ.get("HERMES_HOME")
    os.environ["HERMES_HOME"] = str(where)  # keep the provider out of ~/.hermes
    provider = cls(config={"db_path": str(where / f"{conv.sample_id}-holo.db")})
    provider.initialize(f"locomo-{conv.sample_id}", hermes_home=str(where), platform="cli")
    try:
        for t in conv.turns:
            content = f"{t.speaker}: {view_text(t, named=False)}"
            args = {"action": "add", "content": content, "category": "general"}
            reply = _json.loads(provider.handle_tool_call("fact_store", args))
            if "fact_id" not in reply:
                raise RuntimeError(f"holographic fact_store add answered {reply}")
        yield lambda q: str(provider.prefetch(q) or "")
    finally:
        provider.shutdown()
        if old_home is None:
            os.environ.pop("HERMES_HOME", None)
        else:
            os.environ["HERMES_HOME"] = old_home


@contextmanager
def fixed_context(text: str) -> Iterator[ContextFn]:
    yield lambda _q: text


def _questions(
    conv: Conversation, limit: int | None, categories: Sequence[int] = CATEGORIES
) -> list[Question]:
    # Only questions with a gold answer can be graded.
    qs = [q for q in conv.questions if q.category in categories and q.answer]
    return qs[:limit] if limit is not None else qs


def run_qa(
    path: str | Path,
    *,
    answer: Chat,
    judge: Chat,
    contexts: Sequence[str] = ("memstore", "none"),
    embedder: str = "e5",
    limit_conversations: int | None = None,
    limit_questions: int | None = None,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
    dataset: str = "auto",
    hosts: str | Path | None = None,
) -> dict[str, Any]:
    """Answer and grade every scored question of each conversation under each
    context; returns the report ``format_qa`` prints."""
    bad = [c for c in contexts if c not in CONTEXTS]
    if bad or not contexts:
        raise InvalidInputError(f"contexts must be among {', '.join(CONTEXTS)}, got {bad}")
    data = load_bench_data(path, dataset, hosts)
    convs = data.conversations[:limit_conversations]
    scores = {c: ContextScores() for c in contexts}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(dir=workdir, prefix="memstore-qa-") as tmp:
        for conv in convs:
            qs = _questions(conv, limit_questions, list(data.categories))
            for name in contexts:
                if name in errors:
                    continue
                where = Path(tmp) / name
                where.mkdir(exist_ok=True)
                t0 = time.perf_counter()
                try:
                    with _open_context(name, conv, embedder, where) as ctx:
                        log(f"{conv.sample_id} {name}: ready in {time.perf_counter() - t0:.1f} s")
                        for q in qs:
                            scores[name].rows.append(_one(ctx, q, answer, judge))
                except ImportError as exc:  # a missing optional peer is a result
                    errors[name] = f"not installed: {exc}"
                    log(f"{name}: {errors[name]}")
    return {
        "dataset": str(path),
        "format": data.dataset,
        "categories": {str(c): name for c, name in data.categories.items()},
        "conversations": len(convs),
        "embedder": embedder,
        "answer_model": answer.model,
        "judge_model": judge.model,
        "answer_prompt": ANSWER_PROMPT_VERSION,
        "judge_prompt": JUDGE_PROMPT_VERSION,
        "contexts": {
            name: ({"error": errors[name]} if name in errors else scores[name].summary())
            for name in contexts
        },
    }


def _open_context(
    name: str, conv: Conversation, embedder: str, where: Path
) -> AbstractContextManager[ContextFn]:
    if name == "memstore":
        return memstore_context(conv, embedder, where)
    if name == "holographic":
        return holographic_context(conv, where)
    if name == "full":
        return fixed_context(transcript(conv))
    return fixed_context("")


def _one(ctx: ContextFn, q: Question, answer: Chat, judge: Chat) -> dict[str, Any]:
    t0 = time.perf_counter()
    context = ctx(q.question)
    context_ms = (time.perf_counter() - t0) * 1000
    reply, prompt_tokens, completion_tokens, answer_ms = answer.complete(
        answer_messages(context, q.question)
    )
    verdict, _, _, _ = judge.complete(judge_messages(q.question, q.answer, reply))
    return {
        "category": q.category,
        "label": parse_label(verdict),
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "context_chars": len(context),
        "context_ms": context_ms,
        "answer_ms": answer_ms,
    }


def format_qa(res: dict[str, Any]) -> str:
    names = res.get("categories") or {str(c): "" for c in CATEGORIES}
    cats = list(names)
    lines = [
        f"{res.get('format', 'locomo')} answers, {res['dataset']}: "
        f"{res['conversations']} conversations; answer model "
        f"{res['answer_model']}, judge {res['judge_model']} (prompts {res['answer_prompt']}, "
        f"{res['judge_prompt']}); memstore embedder {res['embedder']}",
        f"{'context':<13}{'J':>7}"
        + "".join(f"{'J c' + c:>8}" for c in cats)
        + f"{'n':>6}{'prompt tok':>12}{'compl tok':>11}{'ctx chars':>11}"
        f"{'ctx p95 ms':>12}{'ans p50 ms':>12}",
    ]
    for name, s in res["contexts"].items():
        if "error" in s:
            lines.append(f"{name:<13}not run: {s['error']}")
            continue
        o = s["overall"]
        lines.append(
            f"{name:<13}{o['accuracy']:>7.3f}"
            + "".join(
                f"{s['per_category'].get(c, {}).get('accuracy', math.nan):>8.3f}" for c in cats
            )
            + f"{int(o['n']):>6}{s['prompt_tokens']:>12.0f}{s['completion_tokens']:>11.1f}"
            f"{s['context_chars']:>11.0f}{s['context_ms']['p95']:>12.1f}"
            f"{s['answer_ms']['p50']:>12.1f}"
        )
    legend = ", ".join(f"{c} {n}" for c, n in names.items() if n) or (
        "1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop"
    )
    lines.append(
        f"  J = share of answers the judge labelled CORRECT (categories {legend}); "
        "tokens are per question, as the server reported them"
    )
    return "\n".join(lines)


__all__ = [
    "ANSWER_SYSTEM",
    "CONTEXTS",
    "JUDGE_SYSTEM",
    "Chat",
    "answer_messages",
    "format_qa",
    "judge_messages",
    "parse_label",
    "run_qa",
    "transcript",
]
