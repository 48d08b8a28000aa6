"""lmmbench.episodes (see docs/architecture.md)."""
