"""lmmbench.metrics (see docs/architecture.md)."""
