"""lmmbench.specs (see docs/architecture.md)."""
