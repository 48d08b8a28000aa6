"""Comparing two sets of runs with confidence: per metric, the change and a bootstrap interval.

Each side is one or more runs, each a list of per-request (or per-sample) values of a metric, in
the order they were measured. The interval comes from a two-level bootstrap: runs are resampled with
replacement within a side, then blocks of consecutive values within each drawn run (a moving-block
bootstrap, so bursts of load count), so run-to-run noise widens the interval when several runs are
given. A change is a regression or an improvement only when its interval excludes zero AND the
change exceeds the metric's threshold (percent for latencies and throughputs, points for
accuracies). Pure Python (``random``), deterministic for a given seed.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["DEFAULT_RESAMPLES", "STATISTICS", "MetricComparison", "MetricRule", "compare_metric", "confirm", "rule_for"]

DEFAULT_RESAMPLES = 1000
Verdict = Literal["regression", "improvement", "unchanged", "unconfirmed", "no interval"]


def _quantile(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return math.nan
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


STATISTICS: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": lambda v: statistics.fmean(v) if v else math.nan,
    "p50": lambda v: _quantile(v, 0.5),
    "p90": lambda v: _quantile(v, 0.9),
    "p99": lambda v: _quantile(v, 0.99),
}


@dataclass(frozen=True)
class MetricRule:
    """How a metric is judged: which way is better, and how large a change must be to count."""

    lower_is_better: bool
    threshold: float  # percent (relative) or points (absolute, for accuracies)
    absolute_points: bool = False  # change in points (x100 of a 0..1 value) instead of percent


def rule_for(metric: str, thresholds: dict[str, float] | None = None) -> MetricRule:
    """The rule of ``metric``: latencies (``*_ms``) lower is better (10 %); throughputs higher (10 %);
    accuracies higher, in points (1 point); the error rate lower, in points (1 point); perplexities lower
    (10 %). ``thresholds`` overrides by name
    (the full metric name or its last dotted part, e.g. ``ttft_ms`` or ``acc``)."""
    base = metric.split(".")[-1].split(" ")[0]
    lower_better = ("latency", "perplexity", "error")
    if base == "error_rate":  # a fraction of requests: its change in points (1 point = 1 % of requests)
        rule = MetricRule(True, 1.0, absolute_points=True)
    elif base.endswith(("_ms", "_ppl")) or any(word in base for word in lower_better):
        rule = MetricRule(True, 10.0)
    elif base in ("qps", "goodput_qps") or "throughput" in base or base.endswith("_per_s"):
        rule = MetricRule(False, 10.0)
    else:
        rule = MetricRule(False, 1.0, absolute_points=True)
    over = thresholds or {}
    for key in (metric, base):
        if key in over:
            return MetricRule(rule.lower_is_better, float(over[key]), rule.absolute_points)
    return rule


@dataclass
class MetricComparison:
    """One metric compared: both sides' values, the change and its interval, and the verdict."""

    metric: str
    statistic: str
    a: float
    b: float
    change: float  # percent, or points for accuracies
    ci_low: float | None
    ci_high: float | None
    unit: str  # "%" or "pt"
    verdict: Verdict
    n_a: int
    n_b: int
    threshold: float


def _change(a: float, b: float, rule: MetricRule) -> float:
    if rule.absolute_points:
        return (b - a) * 100.0
    if a == 0 or not math.isfinite(a) or not math.isfinite(b):
        return math.nan
    return (b / a - 1.0) * 100.0


def _blocks(run: Sequence[float], rng: random.Random) -> list[float]:
    """A moving-block resample of one run's values (in the order they were measured), so a burst of
    slow requests on a busy machine moves whole blocks and widens the interval as it should."""
    n = len(run)
    size = max(1, round(n ** (1 / 3)))
    if n < 4 * size:
        return rng.choices(run, k=n)
    out: list[float] = []
    while len(out) < n:
        start = rng.randrange(n - size + 1)
        out += run[start : start + size]
    return out[:n]


def _resample(side: Sequence[Sequence[float]], rng: random.Random) -> list[float]:
    runs = rng.choices(side, k=len(side)) if len(side) > 1 else side
    out: list[float] = []
    for run in runs:
        out += _blocks(run, rng)
    return out


def compare_metric(metric: str, side_a: Sequence[Sequence[float]], side_b: Sequence[Sequence[float]], *,
                   statistic: str = "mean", rule: MetricRule | None = None, resamples: int = DEFAULT_RESAMPLES,
                   confidence: float = 0.95, seed: int = 0) -> MetricComparison:  # fmt: skip
    """Compare ``metric`` between side A (baseline) and side B: each a list of runs' values.

    A side whose runs each hold one value (a run-level number such as throughput) gets an interval
    only when it has several runs; otherwise the verdict is ``no interval``.
    """
    rule = rule or rule_for(metric)
    stat = STATISTICS[statistic]
    a_runs = [list(r) for r in side_a if r]
    b_runs = [list(r) for r in side_b if r]
    all_a = [x for r in a_runs for x in r]
    all_b = [x for r in b_runs for x in r]
    a, b = stat(all_a), stat(all_b)
    change = _change(a, b, rule)
    unit = "pt" if rule.absolute_points else "%"
    n_a, n_b = len(all_a), len(all_b)
    resamplable = all(len(s) > 1 or (s and len(s[0]) > 1) for s in (a_runs, b_runs))
    if not resamplable or not math.isfinite(change):
        return MetricComparison(metric, statistic, a, b, change, None, None, unit, "no interval", n_a, n_b,
                                rule.threshold)  # fmt: skip
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        d = _change(stat(_resample(a_runs, rng)), stat(_resample(b_runs, rng)), rule)
        if math.isfinite(d):
            draws.append(d)
    alpha = (1.0 - confidence) / 2
    low, high = _quantile(draws, alpha), _quantile(draws, 1 - alpha)
    verdict: Verdict = "unchanged"
    if (low > 0 or high < 0) and abs(change) > rule.threshold:
        worse = change > 0 if rule.lower_is_better else change < 0
        verdict = "regression" if worse else "improvement"
    return MetricComparison(metric, statistic, a, b, change, low, high, unit, verdict, n_a, n_b, rule.threshold)


def confirm(comparisons: Sequence[MetricComparison]) -> None:
    """Mean and median of one metric must agree: a flag raised by only one of them (a burst that moves
    the mean, or a shift the mean's noise hides) becomes ``unconfirmed`` and is not counted."""
    by_stat = {c.statistic: c for c in comparisons}
    mean, median = by_stat.get("mean"), by_stat.get("p50")
    if mean is None or median is None:
        return
    flagged = ("regression", "improvement")
    if mean.verdict != median.verdict:
        for c in (mean, median):
            if c.verdict in flagged:
                c.verdict = "unconfirmed"
