"""lmmbench.datasets (see docs/architecture.md)."""
