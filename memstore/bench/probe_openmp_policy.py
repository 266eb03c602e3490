"""Query and batch embedding time of the e5 engine under each OpenMP wait policy.

Run it while the machine is busy (and again when idle) to see what the
policy memstore picks (``OMP_WAIT_POLICY=PASSIVE`` unless you set one) buys:

    memstore bench openmp-policy [--queries 60]

Each policy runs in its own process, because libgomp reads the variables
once, when it is loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

POLICIES = {
    "memstore default (PASSIVE)": {},
    "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000"},
    "libgomp default (spin 300000)": {"GOMP_SPINCOUNT": "300000"},
    "OMP_WAIT_POLICY=ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
    "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"},
}

CHILD = """
import json, os, sys, time
from memstore.bench.recall_scale import queries
from memstore.embeddings.e5 import E5Embedder
n = int(sys.argv[1])
e = E5Embedder()
qs = queries(n, seed=3)
e.embed_query(qs[0])
ts = []
for q in qs:
    t = time.perf_counter(); e.embed_query(q); ts.append((time.perf_counter() - t) * 1000)
ts.sort()
docs = [q + " and what we did there that day" for q in qs][:64]
t = time.perf_counter(); e.embed_documents(docs); batch = (time.perf_counter() - t) * 1000
print(json.dumps({"p50": ts[len(ts) // 2], "p95": ts[int(len(ts) * 0.95)],
                  "batch_ms": batch, "docs": len(docs), "load": os.getloadavg()[0]}))
"""


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--only", help="comma-separated policy names to run (default: all)")
    args = ap.parse_args(argv)
    chosen = set(args.only.split(",")) if args.only else set(POLICIES)
    print(f"{'policy':32} {'query p50':>10} {'p95':>8} {'64 docs':>9}  load")
    for name, extra in POLICIES.items():
        if name not in chosen:
            continue
        env = {
            k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
        }
        env.update(extra)
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(args.queries)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{name:32} {r['p50']:8.1f}ms {r['p95']:6.1f}ms {r['batch_ms']:7.0f}ms  {r['load']:.1f}"
        )
