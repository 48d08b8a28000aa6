"""Small, dependency-free statistics: percentiles (linear interpolation, as numpy's default), summaries."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["STAT_NAMES", "percentile", "quantile", "summarize"]

STAT_NAMES = ("count", "mean", "std", "min", "p50", "p90", "p95", "p99", "max")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of already sorted values, linear interpolation; NaN when empty."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    if n == 1:
        return float(sorted_values[0])
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(sorted_values[lo]) + (float(sorted_values[hi]) - float(sorted_values[lo])) * frac


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile (q in [0, 1]) of unsorted values: ``percentile`` of the sorted values at 100·q."""
    return percentile(sorted(values), q * 100.0)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """count, mean, std (population), min, p50, p90, p95, p99, max of ``values`` (NaN when empty)."""
    vals = sorted(float(v) for v in values if v is not None and not math.isnan(v))
    n = len(vals)
    if n == 0:
        return {name: (0.0 if name == "count" else math.nan) for name in STAT_NAMES}
    mean = math.fsum(vals) / n
    var = math.fsum((v - mean) ** 2 for v in vals) / n
    return {
        "count": float(n),
        "mean": mean,
        "std": math.sqrt(var),
        "min": vals[0],
        "p50": percentile(vals, 50),
        "p90": percentile(vals, 90),
        "p95": percentile(vals, 95),
        "p99": percentile(vals, 99),
        "max": vals[-1],
    }
