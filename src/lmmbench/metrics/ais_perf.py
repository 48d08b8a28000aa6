"""AISBench's perf metrics (``--mode perf``), computed as its perf summarizer and default calculator compute them.

Followed (read, not copied), AISBench/benchmark as of 2026-08:

- ``ais_bench/benchmark/summarizers/default_perf.py`` (``DefaultPerfSummarizer._calc_perf_data``): per successful
  request, from its ``time_points`` (the send, then the arrival of every SSE data event but ``[DONE]``; for an
  unstreamed request the send and the end): ``latency`` = last - first, ``ttft`` = second - first and ``tpot`` =
  (latency - ttft) / (output_tokens - 1) (both 0 when the model config's ``stream`` is false, which
  ``model_cfg.get("stream", True)`` reads), ``itl`` = the gaps between the points after the first (none with two
  points), ``generate_tokens_speed`` = output_tokens / latency; ``start_time`` / ``end_time`` the first / last point.
- ``ais_bench/benchmark/calculators/base_perf_metric_calculator.py`` and ``default_perf_metric_calculator.py``:
  one stage ``total``; per-request metrics renamed (``E2EL``, ``TTFT``, ``TPOT``, ``ITL``, ``InputTokens``,
  ``OutputTokens``, ``OutputTokenThroughput``, ``PrefillTokenThroughput`` = input_tokens / ttft), ITL pooled over
  every gap of every request, TTFT / TPOT dropped when they sum to 0, ITL dropped when there is none or the first
  request's gaps are all 0; statistics ``Average, Min, Max, Median, P75, P90, P99`` (``np.percentile``, linear),
  each rounded to 4 decimals in seconds, then times in ms (rounded to 4) written ``"<v> ms"``, throughputs
  ``"<v> token/s"``; ``N`` the successful requests (TPOT / ITL: those with a non-zero gap); common metrics over the
  benchmark duration (last end - first start): ``Benchmark Duration`` (ms), request counts, ``Concurrency`` (sum of
  E2EL / duration), ``Max Concurrency`` (the model's ``batch_size``), ``Request Throughput`` (req/s), token totals
  and throughputs (``Total Generated Tokens`` carries no unit: AISBench's unit map names it ``Total Output Tokens``).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_STATS", "AisPerfRecord", "common_metrics", "request_metrics", "stats_list"]

#: ``base_perf_metric_calculator.DEFAULT_STATS``
DEFAULT_STATS = ["Average", "Min", "Max", "Median", "P75", "P90", "P99"]
_MAX_STATS = 8
_PERCENT = re.compile(r"^P(0*[1-9]\d{0,1})$")
_MS = {"E2EL", "TTFT", "TPOT", "ITL"}
_TOKEN_RATE = {"OutputTokenThroughput", "PrefillTokenThroughput"}


@dataclass
class AisPerfRecord:
    """One successful request as the summarizer derives it from its details line and time points (seconds)."""

    time_points: list[float]
    input_tokens: int
    output_tokens: int
    stream: bool

    @property
    def latency(self) -> float:
        """Last point - first point."""
        return self.time_points[-1] - self.time_points[0]

    @property
    def ttft(self) -> float:
        """Second point - first point; 0 when not streamed."""
        return self.time_points[1] - self.time_points[0] if self.stream else 0.0

    @property
    def tpot(self) -> float:
        """(latency - ttft) / (output_tokens - 1); 0 when not streamed or with one token."""
        if not self.stream or self.output_tokens <= 1:
            return 0.0
        return (self.latency - self.ttft) / (self.output_tokens - 1)

    @property
    def itl(self) -> list[float]:
        """Gaps between the points after the send (none with two points)."""
        pts = self.time_points[1:]
        return [b - a for a, b in itertools.pairwise(pts)] if len(self.time_points) > 2 else []


def stats_list(wanted: list[str] | None) -> list[str]:
    """``_validate_stats_list``: at most 8, unknown names dropped, ``Average`` if none is left."""
    items = list(wanted or DEFAULT_STATS)[:_MAX_STATS]
    valid = [s for s in items if s in ("Average", "Min", "Max", "Median") or _PERCENT.match(s)]
    return valid or ["Average"]


def _statistics(values: list[float], stats: list[str]) -> dict[str, Any]:
    import numpy as np

    out: dict[str, Any] = dict.fromkeys(stats, 0)
    if not values:
        return out
    arr = np.array(values, dtype=np.float64)
    for s in stats:
        if s == "Average":
            v = arr.mean()
        elif s == "Min":
            v = arr.min()
        elif s == "Max":
            v = arr.max()
        else:
            v = np.percentile(arr, 50 if s == "Median" else int(s[1:]))
        out[s] = round(float(v), 4)
    return out


def _per_request(recs: list[AisPerfRecord]) -> dict[str, list[float]]:
    """``convert_result``: the metric lists, in AISBench's order, with its drops."""
    ans: dict[str, list[float]] = {
        "E2EL": [r.latency for r in recs], "TTFT": [r.ttft for r in recs], "TPOT": [r.tpot for r in recs],
        "ITL": [g for r in recs for g in r.itl], "InputTokens": [float(r.input_tokens) for r in recs],
        "OutputTokens": [float(r.output_tokens) for r in recs],
        "OutputTokenThroughput": [r.output_tokens / r.latency if r.latency else math.inf for r in recs],
        "PrefillTokenThroughput": [r.input_tokens / r.ttft if r.ttft > 0 else 0.0 for r in recs],
    }  # fmt: skip
    first_gaps = next((r.itl for r in recs if len(r.time_points) > 2), None)  # the first array AISBench appends
    if not ans["ITL"] or (first_gaps is not None and not any(first_gaps)):
        ans.pop("ITL")
    for key in ("TTFT", "TPOT"):
        if math.isclose(sum(ans[key]), 0):
            ans.pop(key)
            if key == "TTFT":
                ans.pop("PrefillTokenThroughput", None)
    return ans


def _with_unit(metric: str, value: Any) -> Any:
    if metric in _MS:
        return f"{round(value * 1000, 4)} ms"
    if metric in _TOKEN_RATE:
        return f"{value} token/s"
    return value


def request_metrics(recs: list[AisPerfRecord], stats: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """The rows of ``<data set>.csv``: metric -> stage ``total`` -> statistic -> value with its unit, and ``N``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    decode_n = sum(1 for r in recs if any(r.itl))
    for metric, values in _per_request(recs).items():
        row = {k: _with_unit(metric, v) for k, v in _statistics(values, stats).items()}
        row["N"] = decode_n if metric in ("TPOT", "ITL") else len(recs)
        out[metric] = {"total": row}
    return out


def common_metrics(recs: list[AisPerfRecord], total: int, max_concurrency: int) -> dict[str, dict[str, Any]]:
    """``<data set>.json``: common metric -> stage ``total`` -> value (with its unit where AISBench adds one)."""
    start = min(r.time_points[0] for r in recs)
    duration = max(r.time_points[-1] for r in recs) - start
    ok = len(recs)
    tin = sum(r.input_tokens for r in recs)
    tout = sum(r.output_tokens for r in recs)
    rate = (lambda x: round(x / duration, 4)) if duration > 0 else (lambda x: 0)
    values: dict[str, Any] = {
        "Benchmark Duration": f"{round(duration * 1000, 4)} ms", "Total Requests": total,
        "Failed Requests": total - ok, "Success Requests": ok,
        "Concurrency": round(sum(r.latency for r in recs) / duration, 4) if duration > 0 else 0,
        "Max Concurrency": max_concurrency, "Request Throughput": f"{rate(ok)} req/s",
        "Total Input Tokens": tin, "Total Generated Tokens": tout,
    }  # fmt: skip
    out = {k: {"total": v} for k, v in values.items()}
    for key, n in (("Input Token Throughput", tin), ("Output Token Throughput", tout),
                   ("Total Token Throughput", tin + tout)):  # fmt: skip
        out[key] = {"total": f"{rate(n)} token/s"} if duration > 0 else {}  # AISBench leaves them empty
    return out
