"""Vectors: per-model vec0 tables filled in the background from a content-hash cache."""
