"""lmmbench.models (see docs/architecture.md)."""
