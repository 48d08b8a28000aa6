"""Repeat noise: how precise a median over repeats is.

Per sample and field: the coefficient of variation over the ok repeats (sample std / mean, in %)
and a distribution-free 95 % confidence interval of the median from order statistics: the
narrowest symmetric pair ``(x_(k), x_(n+1-k))`` of the sorted repeats whose binomial coverage
``1 - 2 * P(Binomial(n, 1/2) < k)`` is at least 95 %. No assumption about the shape of the
distribution (timings are skewed); it needs at least 6 repeats (with 5, min..max covers only
93.75 %), so with fewer the interval is absent rather than overstated.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from lmmbench.metrics.stats import quantile

__all__ = ["CI_LEVEL", "CV_LIMIT_PCT", "cv_pct", "median_ci", "noise_warnings", "repeat_noise"]

CI_LEVEL = 0.95
CV_LIMIT_PCT = 10.0
METHOD = ("cv_pct = sample std / mean over the ok repeats of one sample; median CI = distribution-free "
          "order-statistic 95 % interval (binomial coverage >= 95 %; needs >= 6 repeats, else null)")


def cv_pct(values: Sequence[float]) -> float | None:
    """Coefficient of variation in % (None with fewer than 2 values or a zero mean)."""
    vals = [v for v in values if math.isfinite(v)]
    if len(vals) < 2:
        return None
    mean = statistics.fmean(vals)
    return None if mean == 0 else 100.0 * statistics.stdev(vals) / abs(mean)


def _coverage(n: int, k: int) -> float:
    """Coverage of (x_(k), x_(n+1-k)) as an interval of the median: 1 - 2 P(Binom(n, 1/2) <= k - 1)."""
    tail = sum(math.comb(n, i) for i in range(k)) / 2.0**n
    return 1.0 - 2.0 * tail


def median_ci(values: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float] | None:
    """Order-statistic ``level`` CI of the median, or None when too few values reach that coverage."""
    vals = sorted(v for v in values if math.isfinite(v))
    n = len(vals)
    best = None
    for k in range(1, n // 2 + 1):
        if _coverage(n, k) >= level:
            best = k
        else:
            break
    if best is None:
        return None
    return vals[best - 1], vals[n - best]


def ci_half_width_pct(values: Sequence[float]) -> float | None:
    """Half the width of the median's 95 % CI, in % of the median (None when there is no CI)."""
    ci = median_ci(values)
    vals = [v for v in values if math.isfinite(v)]
    if ci is None or not vals:
        return None
    med = quantile(vals, 0.5)
    return None if med == 0 else 100.0 * (ci[1] - ci[0]) / 2.0 / abs(med)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _sample_noise(values: list[float]) -> dict[str, Any]:
    ci = median_ci(values)
    return {"n": len(values), "median": quantile(values, 0.5) if values else None, "cv_pct": cv_pct(values),
            "median_ci95_low": ci[0] if ci else None, "median_ci95_high": ci[1] if ci else None,
            "median_ci95_half_width_pct": ci_half_width_pct(values)}


def repeat_noise(rows: list[dict[str, Any]], fields: Sequence[str]) -> dict[str, Any]:
    """Per field: the worst and median per-sample CV; per sample: n, median, CV, median CI (ok rows only)."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("status") == "ok":
            by_id.setdefault(str(r.get("sample_id")), []).append(r)
    per_sample: dict[str, dict[str, Any]] = {}
    per_field: dict[str, Any] = {}
    for f in dict.fromkeys(fields):
        cvs: list[tuple[float, str]] = []
        for sid, rs in by_id.items():
            vals = [v for v in (_number(r.get(f)) for r in rs) if math.isfinite(v)]
            if not vals:
                continue
            noise = _sample_noise(vals)
            per_sample.setdefault(sid, {})[f] = noise
            if noise["cv_pct"] is not None:
                cvs.append((noise["cv_pct"], sid))
        if cvs:
            worst = max(cvs)
            medians = [s[f]["median"] for s in per_sample.values() if f in s]
            per_field[f] = {"cv_pct_max": worst[0], "worst_sample": worst[1],
                            "cv_pct_median": statistics.median(c for c, _ in cvs), "samples": len(cvs),
                            "median_of_medians": statistics.median(medians)}
    return {"method": METHOD, "cv_limit_pct": CV_LIMIT_PCT, "per_field": per_field, "per_sample": per_sample}


def noise_warnings(noise: dict[str, Any], total_field: str = "ttft_ms", limit_pct: float = CV_LIMIT_PCT,
                   min_share_pct: float = 5.0) -> list[str]:
    """One line per field whose repeats scatter by more than ``limit_pct`` (CV) on some sample.

    Fields whose typical median is under ``min_share_pct`` % of the total's are left out (a 0.1 ms
    stage always scatters, and does not move the total).
    """
    fields = noise.get("per_field", {})
    total = (fields.get(total_field) or {}).get("median_of_medians")
    out = []
    for field, s in fields.items():
        small = field != total_field and total and s["median_of_medians"] < min_share_pct / 100.0 * total
        if s["cv_pct_max"] > limit_pct and not small:
            out.append(f"{field}: CV of repeats up to {s['cv_pct_max']:.1f} % (sample {s['worst_sample']}; "
                       f"median over samples {s['cv_pct_median']:.1f} %), above {limit_pct:g} %: its medians are "
                       "imprecise; add --repeats or use --target-ci-pct")
    return out
