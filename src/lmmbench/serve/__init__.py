"""lmmbench.serve (see docs/architecture.md)."""
