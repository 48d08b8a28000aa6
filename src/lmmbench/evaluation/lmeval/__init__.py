"""lm-evaluation-harness: its task files translated, its catalogue run through its own TaskManager, and
checks against it."""
