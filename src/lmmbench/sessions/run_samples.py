"""Per-request and per-sample values of a finished run, read back from its files for `runs compare`.

- perf: ``records.jsonl`` (measured requests; warm-up left out), grouped by load point: latencies of the
  successful ones, ``error_rate`` (1 per failed request, 0 per success), and the throughputs (``qps``,
  ``output_token_throughput``, ``goodput_qps``) as time windows of the point's span (``per_window``,
  ``metrics.throughput_windows``: their mean is the throughput, their spread gives its interval); runs
  without records keep the one value of ``summary.csv`` (``per_run``); runs of scored evaluation tasks
  (``perf --tasks --score``) add ``accuracy`` per point (1 per correct answer, 0 per wrong one);
- spec: ``<spec>_results.csv`` (measured rows), every ``*_ms`` column;
- eval: ``results/<task>_metrics.csv``, every numeric metric column, grouped by task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.numbers import to_float
from lmmbench.core.runs.log import RunLog

__all__ = ["PERF_REQUEST_METRICS", "PERF_RUN_METRICS", "RunSamples", "load_samples"]

PERF_REQUEST_METRICS = ("ttft_ms", "tpot_ms", "itl_mean_ms", "e2e_ms")
PERF_RUN_METRICS = ("qps", "output_token_throughput", "goodput_qps")


def _not_negative(metric: str, value: Any, where: str) -> None:
    x = to_float(value)
    if x is not None and x < 0 and metric.endswith("_ms"):
        raise UserError(f"{where}: {metric} = {value} is a negative duration, which no run measures; fix or "
                        "remove that row (an unmeasured time is an empty cell)")


@dataclass
class RunSamples:
    """group -> metric -> values (per request / sample); ``per_run`` holds run-level numbers."""

    run_log: RunLog
    folder: Path
    per_sample: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    per_window: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    per_run: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, group: str, metric: str, value: Any, where: str = "") -> None:
        """Add one value (skipped when it was not measured); a negative duration (``*_ms``: a hand-edited
        file) is refused with the file and row it is in (``where``)."""
        _not_negative(metric, value, where or str(self.folder))
        x = to_float(value)
        if x is not None:
            self.per_sample.setdefault(group, {}).setdefault(metric, []).append(x)


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    from lmmbench.config.input_files import read_text
    from lmmbench.core.csv_rows import csv_rows

    return csv_rows(read_text(path, "results file"))  # non-UTF-8 is one line naming the file


def point_key(labels: dict[str, Any]) -> str:
    """A load point's name from its labels: ``conc=4 in=128 out=32`` or ``rate=10 in=... out=...``."""
    load = f"rate={labels['rate']}" if labels.get("rate") not in (None, "") else f"conc={labels.get('concurrency')}"
    return f"{load} in={labels.get('input_tokens')} out={labels.get('output_tokens')}"


@dataclass
class _PointSpan:
    start_ns: int | None = None
    end_ns: int | None = None
    ok: list[tuple[int, float]] = field(default_factory=list)  # (end_ns, output tokens)
    good: list[tuple[int, float]] = field(default_factory=list)


def _perf_record(s: RunSamples, rec: dict[str, Any], spans: dict[str, _PointSpan], slo: dict[str, float],
                 where: str) -> None:  # fmt: skip
    from lmmbench.metrics.perf_metrics import meets_slo

    group = point_key(rec.get("labels") or {})
    s.add(group, "error_rate", 0.0 if rec.get("ok") else 1.0)
    span = spans.setdefault(group, _PointSpan())
    start, end = rec.get("scheduled_ns"), rec.get("end_ns")
    if start:
        span.start_ns = start if span.start_ns is None else min(span.start_ns, start)
    if end:
        span.end_ns = end if span.end_ns is None else max(span.end_ns, end)
    if not rec.get("ok"):
        return
    for metric in PERF_REQUEST_METRICS:
        s.add(group, metric, rec.get(metric), where)
    if end:
        span.ok.append((end, float(rec.get("output_tokens") or 0)))
        if not slo or meets_slo(rec, slo):
            span.good.append((end, 1.0))


def _perf(s: RunSamples) -> None:
    from lmmbench.metrics.throughput_windows import window_count, window_rates

    path = s.folder / "records.jsonl"
    spans: dict[str, _PointSpan] = {}
    points: dict[Any, str] = {}  # load point index -> its group
    slo = {str(k): float(v) for k, v in (s.run_log.config.get("slo") or {}).items()}
    if path.is_file():
        try:
            with path.open(encoding="utf-8") as fh:  # streamed: a records file can hold millions of lines
                for number, line in enumerate(fh, 1):
                    rec = json.loads(line) if line.strip() else {}
                    if rec and not rec.get("warmup"):
                        _perf_record(s, rec, spans, slo, f"{path} line {number}")
                        labels = rec.get("labels") or {}
                        points.setdefault(labels.get("point"), point_key(labels))
        except ValueError as exc:  # not UTF-8, or a line that is not JSON
            problem = f"{type(exc).__name__}: {str(exc)[:120]}"
            raise UserError(f"{path}: not a records file lmmbench wrote ({problem})") from None
    for group, span in spans.items():
        if span.start_ns is None or span.end_ns is None or not span.ok:
            continue
        n = window_count(len(span.ok))
        windows = s.per_window.setdefault(group, {})
        windows["qps"] = window_rates(span.start_ns, span.end_ns, [(t, 1.0) for t, _ in span.ok], n)
        windows["output_token_throughput"] = window_rates(span.start_ns, span.end_ns, span.ok, n)
        windows["goodput_qps"] = window_rates(span.start_ns, span.end_ns, span.good, n)
    from lmmbench.sessions.perf.quality import accuracy_samples

    for point, correct in accuracy_samples(s.folder):  # perf --tasks --score: 1 per correct answer, 0 per wrong
        if point in points:
            s.add(points[point], "accuracy", correct)
    for row in _rows(s.folder / "summary.csv"):
        for metric in PERF_RUN_METRICS:
            x = to_float(row.get(metric))
            if x is not None and metric not in s.per_window.get(point_key(row), {}):
                s.per_run.setdefault(point_key(row), {})[metric] = x


def _spec(s: RunSamples) -> None:
    from lmmbench.core.ttft_names import upgrade_breakdown_row

    path = s.folder / f"{s.run_log.name}_results.csv"
    for number, written in enumerate(_rows(path), 2):  # line 1 is the header
        if written.get("status", "ok") != "ok":
            continue
        where = f"{path} line {number} (sample {written.get('sample_id', '?')})"
        for key, cell in written.items():  # as written: an upgrade's sums could hide a hand-edited -5
            _not_negative(key, cell, where)
        row = upgrade_breakdown_row(written)  # an old breakdown compares in the TTFT study's terms
        for key, cell in row.items():
            if key.endswith("_ms"):
                s.add("all", key, cell, where)


def _eval(s: RunSamples) -> None:
    for path in sorted((s.folder / "results").glob("*_metrics.csv")):
        task = path.name.removesuffix("_metrics.csv")
        aggregate = path.with_name(f"{task}.json")
        try:
            names = list(json.loads(aggregate.read_text(encoding="utf-8")).get("metrics", {}))
        except (OSError, json.JSONDecodeError):
            continue
        for row in _rows(path):
            if not row.get("error"):
                for metric in names:
                    s.add(task, metric, row.get(metric))


def load_samples(run_log: RunLog, folder: Path) -> RunSamples:
    """The per-sample values of the run in ``folder`` (empty for kinds without any)."""
    samples = RunSamples(run_log, folder)
    {"perf": _perf, "spec": _spec, "eval": _eval}.get(run_log.kind, lambda _s: None)(samples)
    return samples
