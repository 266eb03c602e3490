"""LLM faults through the fake OpenAI server, and user isolation across every
read path. Both use the test support in the repository's ``tests/`` (the fake
server and its scripted model), so they run from a source checkout."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memstore.bench.chaos_kill import drain_l1, uncovered
from memstore.config import Settings
from memstore.errors import MemstoreError
from memstore.store import Store

# The scripted model (tests/derive_support.py) extracts a fact from each of these.
SAYINGS = ["Hi, my name is Alice.", "I live in Berlin.", "I am vegetarian.", "I like running."]
WRONG_SHAPE = '{"memories": [{"fact": "The user is called Alice.", "kind": "persona"}]}'
UNKNOWN_IDS = (
    '{"memories": [{"content": "The user likes tea.", "type": "persona",'
    ' "priority": 50, "scene_name": "Food", "source_message_ids": ["no-such-id"]}]}'
)

FAULTS = [
    "500",
    "hang",
    "malformed",
    "wrong_shape",
    "unknown_ids",
    "truncated",
    "disconnect",
    "huge",
]
MAX_ANSWER = 64 * 1024


def _inject(fake: Any, script: Any, kind: str) -> None:
    many = 50  # more than every retry of one run consumes; the rest is cleared after
    if kind == "500":
        fake.fail_next(500, n=many, retry_after=0.01)
    elif kind == "hang":
        fake.delay_next(3.0, n=many)
    elif kind == "malformed":
        script.override["extract"] = '{"memories": [ {"content": "cut'
    elif kind == "wrong_shape":
        script.override["extract"] = WRONG_SHAPE
    elif kind == "unknown_ids":
        script.override["extract"] = UNKNOWN_IDS
    elif kind == "huge":
        fake.fault_next("huge", n=many, size=MAX_ANSWER * 4)
    else:
        fake.fault_next(kind, n=many)


def _clear(fake: Any, script: Any) -> None:
    script.override.clear()
    fake.reset_faults()


def llm_faults(work: Path, rounds: int = 3) -> dict[str, Any]:
    """Each fault kind, ``rounds`` times: a run under the fault, then one without."""
    from memstore.bench.fakeopenai import FakeOpenAI
    from memstore.bench.scripted_llm import ScriptedLLM
    from memstore.derive import api

    script = ScriptedLLM()
    rows: dict[str, dict[str, int]] = {}
    with FakeOpenAI(chat=script) as fake:
        settings = Settings().replace(
            embedder="hashing",
            scheduler=False,
            background_indexer=False,
            llm_base_url=fake.base_url,
            llm_model="fake-model",
            llm_max_retries=1,
            llm_timeout_s=0.5,
            llm_max_answer_bytes=MAX_ANSWER,
        )
        with Store.open(work / "llm.db", settings=settings) as store:
            for kind in FAULTS:
                row = rows.setdefault(
                    kind,
                    {
                        "runs": 0,
                        "failed": 0,
                        "cursor_past_unextracted": 0,
                        "lost_after_retry": 0,
                        "raw_exceptions": 0,
                    },
                )
                for r in range(rounds):
                    user, session = f"{kind}-{r}", "s1"
                    for i, text in enumerate(SAYINGS):
                        store.capture(
                            user, session, [{"role": "user", "content": text, "id": f"{user}-{i}"}]
                        )
                    _inject(fake, script, kind)
                    row["runs"] += 1
                    try:
                        out = api.run_l1(store.internals.derivation, user, session)
                        row["failed"] += not out.ok
                    except Exception:  # a fault must come back as a failed run
                        row["raw_exceptions"] += 1
                    row["cursor_past_unextracted"] += uncovered(store, user)
                    _clear(fake, script)
                    row["lost_after_retry"] += drain_l1(store, user)
    return rows


def _probes(
    store: Store, reader: str, other_mem: str | None
) -> list[tuple[str, Callable[[], Any]]]:
    q = "aardvark marmalade"
    out: list[tuple[str, Callable[[], Any]]] = [
        *[
            (
                f"search_conversations {s}",
                lambda s=s: store.search_conversations(reader, q, strategy=s, limit=50),
            )
            for s in ("keyword", "vector", "hybrid")
        ],
        *[
            (
                f"search_memories {s}",
                lambda s=s: store.search_memories(reader, q, strategy=s, limit=50),
            )
            for s in ("keyword", "vector", "hybrid")
        ],
        ("recall", lambda: store.recall(reader, q).text),
        ("list_memories", lambda: store.list_memories(reader, include_retired=True)),
        ("list_scenes", lambda: store.list_scenes(reader)),
        ("persona", lambda: store.get_persona(reader)),
        ("events", lambda: [e.payload for e in store.read_events(user_id=reader)]),
    ]
    if other_mem is not None:
        out.append(
            ("history of the other's memory", lambda: store.memory_history(reader, other_mem))
        )
    return out


def _render(value: Any) -> str:
    return json.dumps(value, default=lambda o: getattr(o, "__dict__", repr(o)), ensure_ascii=False)


def isolation(work: Path, pairs: int = 4) -> dict[str, Any]:
    """User B reads with A's words on every read path and must never see A's content."""
    from memstore.derive import api

    settings = Settings().replace(
        embedder="hashing", scheduler=False, background_indexer=False, persona_every=1
    )
    probes = leaks = 0
    paths: set[str] = set()
    with Store.open(work / "iso.db", settings=settings) as store:
        for p in range(pairs):
            a, b = f"owner{p}", f"reader{p}"
            secret = f"aardvark marmalade {p}-secretword"
            for u, t in ((a, f"I love {secret} and I live in Quito"), (b, "I like plain bread")):
                for s in ("s1", "s2"):
                    store.capture_turn(u, s, t, "noted")
                    api.run_l1(store.internals.derivation, u, s)
                api.run_l2(store.internals.derivation, u)
                api.run_l3(store.internals.derivation, u)
            store.reindex()
            mems = store.list_memories(a)
            other = mems[0].memory_id if mems else None
            for name, probe in _probes(store, b, other):
                paths.add(name)
                probes += 1
                try:
                    seen = _render(probe())
                except MemstoreError:
                    continue  # refused: nothing seen
                leaks += "secretword" in seen or "Quito" in seen
            # The owner's own reads do find it: the probes can see a leak.
            assert "secretword" in _render(
                store.search_conversations(a, secret, strategy="keyword")
            )
    return {"pairs": pairs, "read_paths": len(paths), "probes": probes, "leaks": leaks}
