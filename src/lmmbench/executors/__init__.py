"""lmmbench.executors (see docs/architecture.md)."""
