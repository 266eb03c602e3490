"""Peers on the LoCoMo data, side by side with memstore: shared plumbing.

A peer is another memory system a user could install instead of memstore.
Each one gets, per conversation, a fresh store of its own, every turn added
in conversation order (the text memstore captured, ``"Name: text"``), then
every scored question searched for 20 results; its results are mapped back
to ``dia_id``s and scored by the very ``Scores`` memstore's strategies use.
Add and search latency are timed around the peer's own public calls.

Peers run offline or not at all: when one cannot (not installed, or it
tries to reach the network), its entry says exactly why instead of a
number. The peers themselves live in ``peers_mem0`` and
``peers_holographic``; this module holds what they share, including the
loopback OpenAI-compatible ``/v1/embeddings`` server that serves memstore's
own e5 model to peers that only speak that protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstore.bench.peers_common import (
    PEERS,
    PeerRun,
    latency,
    timed,
)

if TYPE_CHECKING:
    from memstore.bench.locomo_index import ConvIndex


def capture_latency(indexes: Sequence[ConvIndex], embedder: str, workdir: Path) -> dict[str, float]:
    """memstore's own per-turn add, for the side-by-side table: every turn captured
    by itself (one call, one transaction) into a scratch store, embedding
    deferred as in production (the background indexer embeds later)."""
    from memstore.bench.locomo_index import locomo_settings, turn_text
    from memstore.store import Store

    ms: list[float] = []
    for idx in indexes:
        conv = idx.conv
        with Store.open(
            workdir / f"capture-{conv.sample_id}.db", settings=locomo_settings(embedder)
        ) as store:
            for t in conv.turns:
                msg = {
                    "role": "user" if t.speaker == conv.speaker_a else "assistant",
                    "content": turn_text(t.speaker, t.text),
                    "timestamp": t.occurred_at,
                    "id": t.dia_id,
                }
                timed(ms, store.capture, conv.sample_id, f"session_{t.session_index}", [msg])
    return latency(ms)


def run_peers(
    names: Sequence[str],
    indexes: Sequence[ConvIndex],
    *,
    log: Callable[[str], None] = lambda _: None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run each named peer over the ingested conversations; JSON-ready dict by name."""
    from memstore.bench.locomo_index import Scores

    out: dict[str, Any] = {}
    for name in names:
        scores = Scores()
        if name == "mem0":
            from memstore.bench.peers_mem0 import run_mem0

            run = run_mem0(indexes, scores, log=log, progress=progress)
        elif name == "holographic":
            from memstore.bench.peers_holographic import run_holographic

            run = run_holographic(indexes, scores, log=log, progress=progress)
        else:
            run = PeerRun(name, error=f"unknown peer {name!r} (known: {', '.join(PEERS)})")
        out[name] = run.as_dict(scores.summary() if scores.rows else None)
        log(f"peer {name}: {'ok' if run.error is None else 'FAILED: ' + run.error}")
    return out


def format_peers(peers: dict[str, Any], ours: dict[str, Any]) -> str:
    """Recall@k and latency of each peer next to memstore's hybrid (same questions)."""
    lines = [
        "peers (same turns, same questions; latency per call, ms)",
        f"{'system':<22}{'R@1':>7}{'R@5':>7}{'R@10':>7}{'R@20':>7}{'H@10':>7}"
        f"{'add p50':>9}{'add p95':>9}{'srch p50':>9}{'srch p95':>9}",
    ]
    hy = ours.get("systems", {}).get("hybrid")
    lat = ours.get("latency_ms", {}).get("hybrid", {})
    cap = ours.get("capture_ms", {})
    if hy is not None:
        o = hy["overall"]
        lines.append(
            f"{'memstore hybrid':<22}"
            + "".join(f"{o[k]:>7.3f}" for k in ("recall@1", "recall@5", "recall@10", "recall@20"))
            + f"{o['hit@10']:>7.3f}"
            + f"{cap.get('p50_ms', float('nan')):>9.2f}{cap.get('p95_ms', float('nan')):>9.2f}"
            + f"{lat.get('p50', float('nan')):>9.1f}{lat.get('p95', float('nan')):>9.1f}"
        )
    for name, p in peers.items():
        label = name
        if not p["ok"]:
            lines.append(f"{label:<22}not run: {p['error']}")
            continue
        o = p["scores"]["overall"]
        lines.append(
            f"{label:<22}"
            + "".join(f"{o[k]:>7.3f}" for k in ("recall@1", "recall@5", "recall@10", "recall@20"))
            + f"{o['hit@10']:>7.3f}"
            + f"{p['add']['p50_ms']:>9.2f}{p['add']['p95_ms']:>9.2f}"
            + f"{p['search']['p50_ms']:>9.1f}{p['search']['p95_ms']:>9.1f}"
        )
        if "prefetch" in p:
            lines.append(
                f"{'':<22}prefetch p50 {p['prefetch']['p50_ms']:.1f} / "
                f"p95 {p['prefetch']['p95_ms']:.1f} ms"
            )
    for name, p in peers.items():
        if p.get("version"):
            lines.append(f"  {name}: version {p['version']}")
        for note in p.get("notes", []):
            lines.append(f"  {name}: {note}")
    return "\n".join(lines)
