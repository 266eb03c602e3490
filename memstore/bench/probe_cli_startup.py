"""CPU time of short ``memstore`` commands next to ``python -c "import sqlalchemy"``.

Usage: memstore bench cli-startup [RUNS]

Builds a small store in a temporary directory (one user, one captured turn,
hashing embedder), then runs each command RUNS times (default 7) as a child
process and prints the median CPU seconds (user + system, from the children's
rusage) and its ratio to the reference. CPU rather than wall time: on a shared
machine the wall clock mostly measures the wait for a core.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def cpu_of(argv: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def memstore_command() -> list[str]:
    """The installed ``memstore`` script next to this Python, else ``python -m memstore``."""
    exe = Path(sys.executable).with_name("memstore")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "memstore"]


def main(argv: list[str]) -> None:
    if len(argv) > 1 or (argv and not argv[0].isdigit()) or (argv and int(argv[0]) < 1):
        raise SystemExit("usage: memstore bench cli-startup [RUNS]  (RUNS: a whole number >= 1)")
    runs = int(argv[0]) if argv else 7
    memstore = memstore_command()
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "cli.db")
        env = {**os.environ, "MEMSTORE_EMBEDDER": "hashing", "MEMSTORE_DB": db}
        env.pop("MEMSTORE_LLM_BASE_URL", None)
        subprocess.run(
            [*memstore, "capture", "--user", "alice", "--session", "s1",
             "--user-text", "I like green tea", "--assistant-text", "Noted"],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        cases = {
            'python -c "import sqlalchemy" (reference)': [
                sys.executable, "-c", "import sqlalchemy"
            ],
            "memstore --help": [*memstore, "--help"],
            "memstore users list": [*memstore, "users", "list"],
            "memstore memories list --user alice": [
                *memstore, "memories", "list", "--user", "alice"
            ],
            "memstore search conversations tea --user alice": [
                *memstore, "search", "conversations", "tea", "--user", "alice"
            ],
        }  # fmt: skip
        medians = {
            name: statistics.median(cpu_of(argv, env) for _ in range(runs))
            for name, argv in cases.items()
        }
    ref = next(iter(medians.values()))
    print(f"median CPU seconds over {runs} runs; load average {os.getloadavg()[0]:.1f}")
    for name, cpu in medians.items():
        print(f"{cpu:6.2f} s  {cpu / ref:4.1f}x  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
