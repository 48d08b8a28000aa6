"""Summary statistics (mean / std / p50 / p90 / p99) per sample, per group and overall.

Sample rows also carry the repeat noise (``metrics.noise``): the coefficient of variation over the
repeats (``cv_pct``) and the order-statistic 95 % CI of the median (empty with fewer than 6 repeats).
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmmbench.metrics.stats import quantile
from lmmbench.reports.results_csv import numeric

__all__ = ["SUMMARY_COLUMNS", "describe", "numeric_fields", "per_sample_medians", "write_summary"]

SUMMARY_COLUMNS = ("level", "key", "field", "n", "mean", "std", "p50", "p90", "p99", "cv_pct", "median_ci95_low",
                   "median_ci95_high")
_NOT_STATS = {"repeat", "first_token_id", "level"}


def describe(values: Sequence[float]) -> dict[str, float]:
    """n, mean, std (sample), p50, p90, p99 of the finite values."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return {"n": 0, "mean": math.nan, "std": math.nan, "p50": math.nan, "p90": math.nan, "p99": math.nan}
    return {
        "n": len(vals),
        "mean": statistics.fmean(vals),
        "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
        "p50": quantile(vals, 0.5),
        "p90": quantile(vals, 0.9),
        "p99": quantile(vals, 0.99),
    }


def numeric_fields(rows: list[dict[str, Any]], candidates: Sequence[str]) -> list[str]:
    """The candidate fields that hold a number in at least one row."""
    return [f for f in candidates if f not in _NOT_STATS
            and any(math.isfinite(numeric(r.get(f))) for r in rows)]


def _ok(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok"]


def per_sample_medians(rows: list[dict[str, Any]], fields: Sequence[str],
                       stat: str = "median") -> dict[str, dict[str, Any]]:
    """sample_id -> {field: median (``stat``: median | mean | min) over ok repeats, 'group', 'n'}."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in _ok(rows):
        by_id.setdefault(str(r.get("sample_id")), []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for sid, rs in by_id.items():
        med: dict[str, Any] = {"group": rs[0].get("group", ""), "n": len(rs)}
        for f in fields:
            vals = [numeric(r.get(f)) for r in rs]
            vals = [v for v in vals if math.isfinite(v)]
            if not vals:
                med[f] = math.nan
            else:
                med[f] = {"median": quantile(vals, 0.5), "mean": statistics.fmean(vals), "min": min(vals)}[stat]
        out[sid] = med
    return out


def _noise_cells(values: list[float]) -> tuple[str, str, str]:
    """cv_pct and the median's 95 % CI over one sample's repeats; empty where not defined."""
    from lmmbench.metrics.noise import cv_pct, median_ci

    vals = [v for v in values if math.isfinite(v)]
    cv = cv_pct(vals)
    ci = median_ci(vals)
    low, high = ("", "") if ci is None else (f"{ci[0]:.6g}", f"{ci[1]:.6g}")
    return ("" if cv is None else f"{cv:.4g}", low, high)


def write_summary(rows: list[dict[str, Any]], fields: Sequence[str], path: Path) -> Path:
    """Write ``<spec>_summary.csv``: statistics of each numeric field per sample, group and overall."""
    ok = _ok(rows)
    fields = numeric_fields(ok, fields)
    levels: list[tuple[str, str, list[dict[str, Any]]]] = []
    for key in dict.fromkeys(str(r.get("sample_id")) for r in ok):
        levels.append(("sample", key, [r for r in ok if str(r.get("sample_id")) == key]))
    for key in dict.fromkeys(str(r.get("group", "")) for r in ok):
        levels.append(("group", key, [r for r in ok if str(r.get("group", "")) == key]))
    levels.append(("all", "all", ok))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(SUMMARY_COLUMNS)
        for level, key, rs in levels:
            for f in fields:
                vals = [numeric(r.get(f)) for r in rs]
                d = describe(vals)
                writer.writerow([level, key, f, d["n"], *(f"{d[s]:.6g}" for s in ("mean", "std", "p50", "p90", "p99")),
                                 *(_noise_cells(vals) if level == "sample" else ("", "", ""))])
    return path
