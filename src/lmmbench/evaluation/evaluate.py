"""Scoring existing predictions (AISBench's `eval` mode): per-sample metrics and task aggregates.

Writes ``results/<task>_metrics.csv`` (one row per sample: doc id, group columns, every metric, the
error if the sample failed) and ``results/<task>.json`` (aggregates with standard errors, and the
same per group of every ``group_by`` column; an entry ``a+b`` groups by the pair of values).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.evaluation.lmeval.filters import apply_pipeline
from lmmbench.evaluation.runner import read_predictions
from lmmbench.evaluation.task_config import MetricSpec, TaskConfig, group_columns, group_parts
from lmmbench.metrics.accuracy import AccuracyMetric, MetricValue, aggregate_metric, get_metric

__all__ = ["TaskResult", "evaluate_task", "extract_answer"]


@dataclass
class TaskResult:
    """Aggregated metrics of one task, overall and per group."""

    task: str
    version: int | str
    kind: str
    model: str
    n_samples: int
    n_errors: int
    metrics: dict[str, MetricValue]
    groups: dict[str, dict[str, dict[str, MetricValue]]] = field(default_factory=dict)
    #: requests whose context was left-truncated to the model's window (lm-eval's rule), by lm-eval request kind;
    #: None where not counted (predictions written before the count existed, an endpoint's generation)
    truncated: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _truncated(task: TaskConfig, rows: list[dict[str, Any]]) -> dict[str, int] | None:
    """Truncated requests of the task's predictions by lm-eval request kind (None when a row lacks the count)."""
    if task.kind == "loglikelihood_rolling":  # disjoint windows: nothing is ever cut
        return {"generate_until": 0, "loglikelihood": 0}
    counted = [r for r in rows if not r.get("error")]
    if any(not isinstance(r.get("truncated"), int) for r in counted):
        return None
    n = sum(int(r["truncated"]) for r in counted)
    return {"generate_until": n if task.kind == "generate" else 0, "loglikelihood": 0 if task.kind == "generate" else n}


def extract_answer(task: TaskConfig, output: str) -> str:
    """The answer in a generated text: the regex group if configured, stripped if asked."""
    g = task.generation
    text = output
    if g.answer_regex:
        m = re.search(g.answer_regex, text)
        text = (m.group(g.regex_group) if m else g.regex_fallback) or ""
    return text.strip() if g.strip else text


def _metric_entries(task: TaskConfig) -> list[tuple[MetricSpec, AccuracyMetric]]:
    """(spec, metric) per reported value; with lm-eval filter pipelines, one per metric and pipeline,
    the spec named ``metric,pipeline`` as lm-eval names them."""
    specs = task.default_metrics()
    metrics = [(s, get_metric(s.name, task.kind, f"{task.source_file}: metrics")) for s in specs]
    if task.kind != "generate" or not task.filters:
        return metrics
    return [(s.model_copy(update={"name": f"{s.name},{f.name}"}), m) for f in task.filters for s, m in metrics]


def _filtered(task: TaskConfig, sample: dict[str, Any], key: str) -> dict[str, Any]:
    """The sample with the prediction of the filter pipeline named in ``key`` (``metric,pipeline``)."""
    if task.kind != "generate" or not task.filters:
        return sample
    name = key.partition(",")[2]
    pipeline = next(f for f in task.filters if f.name == name)
    return {**sample, "prediction": apply_pipeline(pipeline, str(sample.get("output", "")))}


def _scalar(metric: AccuracyMetric, value: Any) -> float:
    """A per-sample number for metrics.csv (perplexities per document, BLEU per sentence is blank)."""
    if isinstance(value, tuple):
        return float("nan") if metric.name == "bleu" else metric.aggregate([value])
    return float(value)


def evaluate_task(task: TaskConfig, pred_path: Path, results_dir: Path) -> TaskResult:
    """Score the predictions of ``task`` and write its per-sample and aggregate results."""
    rows = list(read_predictions(pred_path).values())
    if not rows:
        raise UserError(f"{pred_path}: no predictions for task '{task.task}'; run with --mode infer or all first")
    by_doc: dict[int, dict[str, Any]] = {}
    for r in rows:  # the last prediction of a sample wins
        by_doc[int(r["doc_id"])] = r
    limit = task.data.limit
    rows = [by_doc[k] for k in sorted(by_doc) if limit is None or k < limit]
    metrics = _metric_entries(task)
    results_dir.mkdir(parents=True, exist_ok=True)
    values: dict[str, list[Any]] = {s.name: [] for s, _ in metrics}
    kept: list[dict[str, Any]] = []
    n_errors = 0
    csv_path = results_dir / f"{task.task}_metrics.csv"
    with csv_path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        columns = group_columns(task.group_by)
        writer.writerow(["doc_id", *columns, *(s.name for s, _ in metrics), "prediction", "error"])
        for r in rows:
            meta = r.get("meta") or {}
            err = r.get("error")
            sample = dict(r)
            if task.kind == "generate" and not err:
                sample["prediction"] = extract_answer(task, str(r.get("output", "")))
            per: dict[str, Any] = {}
            if not err:
                try:
                    for s, m in metrics:
                        per[s.name] = m.score(_filtered(task, sample, s.name), s.options)
                except (ValueError, KeyError, TypeError, IndexError) as exc:
                    err = f"scoring failed: {type(exc).__name__}: {exc}"
            if err:
                n_errors += 1
                writer.writerow([r["doc_id"], *(meta.get(c) for c in columns), *([""] * len(metrics)), "", err])
                continue
            for s, _m in metrics:
                values[s.name].append(per[s.name])
            kept.append({"meta": meta, "values": per})
            shown = _filtered(task, sample, metrics[0][0].name).get("prediction", "") if metrics else ""
            writer.writerow(
                [
                    r["doc_id"],
                    *(meta.get(c) for c in columns),
                    *(_scalar(m, per[s.name]) for s, m in metrics),
                    shown,
                    "",
                ]
            )
    agg = {s.name: aggregate_metric(m, values[s.name]) for s, m in metrics}
    groups: dict[str, dict[str, dict[str, MetricValue]]] = {}
    for col in task.group_by:  # "a+b": one group per pair of values, keyed "x+y"
        members: dict[str, list[dict[str, Any]]] = {}
        for k in kept:
            members.setdefault("+".join(str(k["meta"].get(c)) for c in group_parts(col)), []).append(k)
        groups[col] = {
            g: {s.name: aggregate_metric(m, [k["values"][s.name] for k in ks], bootstrap_iters=200) for s, m in metrics}
            for g, ks in sorted(members.items())
        }
    result = TaskResult(
        task.task, task.version, task.kind, str(rows[0].get("model", "")), len(rows), n_errors, agg, groups,
        _truncated(task, rows),
    )
    (results_dir / f"{task.task}.json").write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    return result
