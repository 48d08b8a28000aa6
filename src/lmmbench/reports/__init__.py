"""lmmbench.reports (see docs/architecture.md)."""
