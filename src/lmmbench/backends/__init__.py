"""lmmbench.backends (see docs/architecture.md)."""
