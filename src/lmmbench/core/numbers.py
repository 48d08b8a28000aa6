"""Reading numbers back from files: one rule for a cell that may be empty, text, a bool, NaN or inf."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["to_float"]


def to_float(value: Any) -> float | None:
    """A finite float from a cell or number; None for empty, non-numeric, a bool, NaN or inf."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None
