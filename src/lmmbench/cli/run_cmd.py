"""`lmmbench` commands for this feature (placeholder until the feature lands)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this feature's commands to ``app``."""
    del app
