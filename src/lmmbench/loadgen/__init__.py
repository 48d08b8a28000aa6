"""lmmbench.loadgen (see docs/architecture.md)."""
