"""Bringing data in and out: the upstream's data directory and seed files,
memstore's own JSONL export, and line-by-line validated imports."""
