"""JSON files of a run: strict JSON (NaN / inf written as null), paths as strings, optional rounding."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["json_safe", "write_json"]


def json_safe(obj: Any, float_digits: int | None = None) -> Any:
    """``obj`` with NaN / inf floats as None, tuples as lists, paths as strings and, when
    ``float_digits`` is given, finite floats rounded to that many digits."""
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return obj if float_digits is None else round(obj, float_digits)
    if isinstance(obj, dict):
        return {k: json_safe(v, float_digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v, float_digits) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_json(path: Path, obj: Any, *, float_digits: int | None = None) -> Path:
    """Write ``obj`` as indented JSON through ``json_safe`` (creating the folder); returns ``path``.

    Secrets (``api_key``, headers, any value registered with ``core.secrets``) are masked."""
    from lmmbench.core.secrets import redact_config

    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(redact_config(json_safe(obj, float_digits)), indent=2, default=str)
    path.write_text(text + "\n", encoding="utf-8")
    return path
