"""Least-squares linear fits ``y = slope * x + intercept`` with R², in pure Python."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["LinearFit", "linear_fit"]


@dataclass(frozen=True)
class LinearFit:
    """A fitted line; ``r2`` is NaN when y has no variance or x has a single value."""

    slope: float
    intercept: float
    r2: float
    n: int
    x_min: float
    x_max: float

    def as_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}

    def predict(self, x: float) -> float:
        return self.slope * x + self.intercept


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> LinearFit:
    """Ordinary least squares over paired values (NaNs dropped); needs two distinct x values."""
    pairs = [(float(x), float(y)) for x, y in zip(xs, ys, strict=True) if not (math.isnan(x) or math.isnan(y))]
    n = len(pairs)
    if n == 0:
        return LinearFit(math.nan, math.nan, math.nan, 0, math.nan, math.nan)
    mx = sum(p[0] for p in pairs) / n
    my = sum(p[1] for p in pairs) / n
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    sxy = sum((x - mx) * (y - my) for x, y in pairs)
    syy = sum((y - my) ** 2 for _, y in pairs)
    x_min, x_max = min(p[0] for p in pairs), max(p[0] for p in pairs)
    if sxx == 0:
        return LinearFit(math.nan, my, math.nan, n, x_min, x_max)
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in pairs)
    r2 = 1.0 - ss_res / syy if syy > 0 else math.nan
    return LinearFit(slope, intercept, r2, n, x_min, x_max)
