"""L2: scene blocks that group memories by topic (prompts, rules, projection, run)."""
