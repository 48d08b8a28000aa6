"""lmmbench.media (see docs/architecture.md)."""
