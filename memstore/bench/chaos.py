"""``memstore bench chaos``: try to break the store from the outside and count
what was lost. The goal is 0 in every "lost"/"leak"/"mismatch" column.

- SIGKILL during capture, rebuild, erasure and extraction (``chaos_kill``);
- concurrent writers in threads and processes, and a mixed load with the
  pipeline and a searcher, timing every write transaction (``chaos_load``);
- LLM faults through the fake OpenAI server, and isolation of users across
  every read path (``chaos_llm``; needs the repository's ``tests/``).

The reliability tests (``pytest -m reliability``) run the same functions with
fewer trials.
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memstore.bench import chaos_kill, chaos_llm, chaos_load


@dataclass(frozen=True)
class ChaosPlan:
    kill_trials: int = 30
    erase_trials: int = 20
    llm_rounds: int = 5
    isolation_pairs: int = 8
    writers_per: int = 300
    mixed_seconds: float = 90.0
    seed: int = 11


def run_chaos(
    plan: ChaosPlan, workdir: Path | None = None, log: Callable[[str], None] = lambda _m: None
) -> dict[str, Any]:
    from memstore.bench.snapshot import snapshot

    chaos_llm.repo_tests()  # the fake LLM server still lives under tests/

    rng = random.Random(plan.seed)
    res: dict[str, Any] = {"plan": asdict(plan)}
    quiet = logging.getLogger("memstore")
    level = quiet.level
    # Failed runs log a warning each; expected here by the hundred.
    quiet.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(dir=workdir, prefix="memstore-chaos-") as tmp:
            work = Path(tmp)
            steps: list[tuple[str, Callable[[], Any]]] = [
                (
                    "kill_capture",
                    lambda: chaos_kill.kill_capture(plan.kill_trials, work, snapshot, rng),
                ),
                (
                    "kill_rebuild",
                    lambda: chaos_kill.kill_rebuild(plan.kill_trials, work, snapshot, rng),
                ),
                ("kill_erase", lambda: chaos_kill.kill_erase(plan.erase_trials, work, rng)),
                ("kill_extract", lambda: chaos_kill.kill_extract(plan.kill_trials, work, rng)),
                ("writers", lambda: chaos_load.threads_and_processes(work, per=plan.writers_per)),
                ("llm_faults", lambda: chaos_llm.llm_faults(work, plan.llm_rounds)),
                ("isolation", lambda: chaos_llm.isolation(work, plan.isolation_pairs)),
                ("mixed", lambda: chaos_load.mixed_load(work, plan.mixed_seconds)),
            ]
            for name, step in steps:
                log(f"chaos: {name} ...")
                t0 = time.monotonic()
                res[name] = step()
                res[name + "_seconds"] = round(time.monotonic() - t0, 1)
    finally:
        quiet.setLevel(level)
    return res


def format_chaos(res: dict[str, Any]) -> str:
    kc, kr, ke, kx = (
        res["kill_capture"],
        res["kill_rebuild"],
        res["kill_erase"],
        res["kill_extract"],
    )
    lines = [
        "memstore bench chaos (goal: 0 in every lost / leak / mismatch figure)",
        f"SIGKILL during capture   {kc['trials']} kills: {kc['acknowledged']} acknowledged, "
        f"lost {kc['lost']}, duplicated {kc['duplicates']}, "
        f"projections != rebuild {kc['projection_mismatches']}",
        f"SIGKILL during rebuild   {kr['trials']} kills ({kr['killed_mid_work']} mid-rebuild): "
        f"log changed {kr['log_changed']}, projections != reference {kr['projection_mismatches']}",
        f"SIGKILL during erasure   {ke['trials']} kills ({ke['erasure_committed']} after commit, "
        f"{ke['marker_pending_at_kill']} with compaction pending): erased bytes left after "
        f"reopen {ke['secret_left_after_reopen']}, half-erased {ke['half_erased']}, "
        f"other user lost {ke['keeper_lost']}",
        f"SIGKILL during extraction {kx['trials']} kills: {kx['acknowledged']} acknowledged, "
        f"lost {kx['lost']}, cursor past unextracted {kx['cursor_past_unextracted']}, "
        f"unextracted after recovery {kx['unextracted_after_recovery']}",
    ]
    for kind in ("threads", "processes"):
        w = res["writers"][kind]
        lines.append(
            f"writers, {w['writers']} {kind:<9} {w['captures']} captures: errors {w['errors']}, "
            f"lost {w['lost']}, duplicated {w['duplicates']}, "
            f"p50 {w['p50_ms']} ms, p99 {w['p99_ms']} ms"
        )
    lines.append("LLM faults (fault run, then a clean retry):")
    for kind, r in res["llm_faults"].items():
        lines.append(
            f"  {kind:<12} {r['runs']} runs, {r['failed']} failed, raw exceptions "
            f"{r['raw_exceptions']}, cursor past unextracted {r['cursor_past_unextracted']}, "
            f"lost after retry {r['lost_after_retry']}"
        )
    iso = res["isolation"]
    lines.append(
        f"isolation                {iso['pairs']} user pairs x {iso['read_paths']} read paths "
        f"= {iso['probes']} probes: leaks {iso['leaks']}"
    )
    m = res["mixed"]
    lines += [
        f"mixed load, {m['seconds']:.0f} s: {m['threads']} threads + {m['processes']} processes "
        f"capturing, a searcher, the pipeline: {m['captures']} captures, errors {m['errors']}, "
        f"lost {m['lost']}, duplicated {m['duplicates']}",
        f"  capture p50/p99: threads {m['thread_p50_ms']}/{m['thread_p99_ms']} ms, "
        f"processes {m['process_p50_ms']}/{m['process_p99_ms']} ms; "
        f"search p50/p99 {m['search_p50_ms']}/{m['search_p99_ms']} ms",
        f"  run_pipeline: {m['pipeline_runs']} runs, longest {m['pipeline_longest_s']} s; "
        f"write transactions in this process: {m['write_transactions']}, "
        f"p99 {m['write_p99_ms']} ms, longest {m['write_longest_ms']} ms",
        f"  waiting for the write lock in this process: p99 {m['write_wait_p99_ms']} ms, "
        f"longest {m['write_wait_longest_ms']} ms",
        f"  longest write transaction at: {m['write_longest_at']}",
    ]
    if m["other_failures"]:
        lines.append(f"  failures: {m['other_failures']}")
    return "\n".join(lines)
