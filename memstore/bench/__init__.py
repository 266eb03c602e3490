"""Benchmark helpers: retrieval metrics and the LoCoMo data reader."""
