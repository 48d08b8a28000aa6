"""lmmbench.profiling (see docs/architecture.md)."""
