"""Reading JSON Lines: one JSON value per non-blank line, a bad line named by file and line number."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["parse_json_lines", "read_json_lines"]


def parse_json_lines(text: str, source: Path | str) -> list[tuple[int, Any]]:
    """``(line_number, value)`` for every non-blank line of ``text`` (1-based numbers); a line that is
    not valid JSON is a ``UserError`` naming ``source`` and the line."""
    rows: list[tuple[int, Any]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise UserError(f"{source}:{lineno}: not valid JSON ({exc.msg}); one JSON value per line") from None
        except RecursionError:
            raise UserError(f"{source}:{lineno}: JSON nested too deeply") from None
    return rows


def read_json_lines(path: Path) -> list[tuple[int, Any]]:
    """``parse_json_lines`` of the file at ``path`` (UTF-8)."""
    from lmmbench.config.input_files import read_text

    return parse_json_lines(read_text(path, "JSON Lines file"), path)
