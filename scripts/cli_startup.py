"""CPU time of short ``memstore`` commands next to ``python -c "import sqlalchemy"``.

Usage: .venv/bin/python scripts/cli_startup.py [RUNS]

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


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    exe = Path(sys.executable).with_name("memstore")
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "cli.db")
        env = {**os.environ, "MEMSTORE_EMBEDDER": "hashing", "MEMSTORE_DB": db}
        env.pop("MEMSTORE_LLM_BASE_URL", None)
        subprocess.run(
            [str(exe), "capture", "--user", "alice", "--session", "s1",
             "--user-text", "I like green tea", "--assistant-text", "Noted"],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        cases = {
            'python -c "import sqlalchemy" (reference)': [
                sys.executable, "-c", "import sqlalchemy"
            ],
            "memstore --help": [str(exe), "--help"],
            "memstore users list": [str(exe), "users", "list"],
            "memstore memories list --user alice": [
                str(exe), "memories", "list", "--user", "alice"
            ],
            "memstore search conversations tea --user alice": [
                str(exe), "search", "conversations", "tea", "--user", "alice"
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
    main()
