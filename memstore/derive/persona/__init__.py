"""L3: the persona profile (prompts, rules, projection, run)."""
