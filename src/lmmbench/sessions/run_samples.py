"""Per-request and per-sample values of a finished run, read back from its files for `runs compare`.

- perf: ``records.jsonl`` (measured, successful requests; warm-up left out), grouped by load point;
  throughputs per point from ``summary.csv`` (one value per run);
- spec: ``<spec>_results.csv`` (measured rows), every ``*_ms`` column;
- eval: ``results/<task>_metrics.csv``, every numeric metric column, grouped by task.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.core.run_log import RunLog
from lmmbench.core.run_summaries import to_float

__all__ = ["PERF_REQUEST_METRICS", "PERF_RUN_METRICS", "RunSamples", "load_samples"]

PERF_REQUEST_METRICS = ("ttft_ms", "tpot_ms", "itl_mean_ms", "e2e_ms")
PERF_RUN_METRICS = ("qps", "output_token_throughput")


@dataclass
class RunSamples:
    """group -> metric -> values (per request / sample); ``per_run`` holds run-level numbers."""

    run_log: RunLog
    folder: Path
    per_sample: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    per_run: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, group: str, metric: str, value: Any) -> None:
        """Add one value (skipped when it was not measured)."""
        x = to_float(value)
        if x is not None:
            self.per_sample.setdefault(group, {}).setdefault(metric, []).append(x)


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def point_key(labels: dict[str, Any]) -> str:
    """A load point's name from its labels: ``conc=4 in=128 out=32`` or ``rate=10 in=... out=...``."""
    load = f"rate={labels['rate']}" if labels.get("rate") not in (None, "") else f"conc={labels.get('concurrency')}"
    return f"{load} in={labels.get('input_tokens')} out={labels.get('output_tokens')}"


def _perf(s: RunSamples) -> None:
    path = s.folder / "records.jsonl"
    if path.is_file():
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                rec = json.loads(line)
                if rec.get("warmup") or not rec.get("ok"):
                    continue
                group = point_key(rec.get("labels") or {})
                for metric in PERF_REQUEST_METRICS:
                    s.add(group, metric, rec.get(metric))
    for row in _rows(s.folder / "summary.csv"):
        for metric in PERF_RUN_METRICS:
            x = to_float(row.get(metric))
            if x is not None:
                s.per_run.setdefault(point_key(row), {})[metric] = x


def _spec(s: RunSamples) -> None:
    for row in _rows(s.folder / f"{s.run_log.name}_results.csv"):
        if row.get("status", "ok") != "ok":
            continue
        for key, cell in row.items():
            if key.endswith("_ms"):
                s.add("all", key, cell)


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
