"""L1: memories extracted from conversation (prompts, offline rules, projection, run)."""
