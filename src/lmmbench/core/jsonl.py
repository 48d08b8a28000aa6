"""JSON Lines files read whole: every non-blank line a JSON value, a line that is not one named by file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["jsonl_values"]


def jsonl_values(path: Path, fix: str = "fix or remove the line") -> list[Any]:
    """The values of ``path``'s non-blank lines, in order; UserError ``path:N: not JSON (...); FIX`` at the first
    line that is not JSON."""
    values = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip():
            continue
        try:
            values.append(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{n}: not JSON ({exc.msg}); {fix}") from None
    return values
