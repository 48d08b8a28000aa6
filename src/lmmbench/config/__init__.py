"""lmmbench.config (see docs/architecture.md)."""
