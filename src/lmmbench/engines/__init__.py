"""lmmbench.engines (see docs/architecture.md)."""
