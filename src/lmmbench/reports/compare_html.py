"""The comparison page of `lmmbench runs report` (placeholder, filled in below)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["write_comparison_page"]


def write_comparison_page(results: Sequence[Any], out: Path) -> Path:
    """Write the page comparing ``results``; returns its path."""
    out.write_text("<!DOCTYPE html><html></html>\n", encoding="utf-8")
    return out
