"""Small, dependency-free statistics: percentiles (linear interpolation, as numpy's default), summaries."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["ALWAYS_PERCENTILES", "STAT_NAMES", "percentile", "percentile_key", "quantile", "summarize"]

STAT_NAMES = ("count", "mean", "std", "min", "p50", "p90", "p95", "p99", "max")
#: Percentiles every summary has (reports and messages read them), whatever else is asked for.
ALWAYS_PERCENTILES = (50.0, 90.0, 99.0)
_DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0)


def percentile_key(q: float) -> str:
    """The stat name of percentile ``q``: p99, p99.9 (as vLLM names them)."""
    return f"p{int(q)}" if float(q).is_integer() else f"p{q:g}"


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


def summarize(values: Sequence[float], percentiles: Sequence[float] = _DEFAULT_PERCENTILES) -> dict[str, float]:
    """count, mean, std (population), min, the percentiles (and p50/p90/p99 always), max (NaN when empty)."""
    vals = sorted(float(v) for v in values if v is not None and not math.isnan(v))
    n = len(vals)
    qs = sorted(set(ALWAYS_PERCENTILES) | {float(q) for q in percentiles})
    if n == 0:
        empty = {"count": 0.0, "mean": math.nan, "std": math.nan, "min": math.nan}
        return {**empty, **{percentile_key(q): math.nan for q in qs}, "max": math.nan}
    mean = math.fsum(vals) / n
    var = math.fsum((v - mean) ** 2 for v in vals) / n
    out = {"count": float(n), "mean": mean, "std": math.sqrt(var), "min": vals[0]}
    out.update({percentile_key(q): percentile(vals, q) for q in qs})
    out["max"] = vals[-1]
    return out
