"""Summaries (VLMHyperBench's MetricAggregator): one table of every task's metrics, and pivots by group.

``summary/summary.csv`` and ``summary/summary.md`` hold one row per (task, metric): value, standard
error, samples, errors. ``summary/<task>_by_<column>.csv`` is the pivot of a group column: one row
per group value, one column per metric.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

from lmmbench.evaluation.evaluate import TaskResult

__all__ = ["write_summary"]


def _fmt(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:.{digits}f}"


def write_summary(results: Sequence[TaskResult], summary_dir: Path, title: str = "lmmbench eval") -> list[Path]:
    """Write the summary CSV, Markdown and group pivots; returns the files written."""
    summary_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    csv_path = summary_dir / "summary.csv"
    with csv_path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["task", "version", "model", "metric", "value", "stderr", "n_samples", "n_errors"])
        for r in results:
            for name, mv in r.metrics.items():
                w.writerow(
                    [
                        r.task,
                        r.version,
                        r.model,
                        name,
                        repr(mv.value),
                        "" if mv.stderr is None else repr(mv.stderr),
                        mv.n,
                        r.n_errors,
                    ]
                )
    written.append(csv_path)
    lines = [
        f"# {title}",
        "",
        "| task | metric | value | ± stderr | samples | errors |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        for name, mv in r.metrics.items():
            lines.append(f"| {r.task} | {name} | {_fmt(mv.value)} | {_fmt(mv.stderr)} | {mv.n} | {r.n_errors} |")
    for r in results:
        for col, groups in r.groups.items():
            names = list(r.metrics)
            pivot = summary_dir / f"{r.task}_by_{col}.csv"
            with pivot.open("w", encoding="utf-8", newline="") as fh:
                w = csv.writer(fh)
                w.writerow([col, "n", *names])
                for g, mvs in groups.items():
                    n = next(iter(mvs.values())).n if mvs else 0
                    w.writerow([g, n, *(repr(mvs[m].value) if m in mvs else "" for m in names)])  # a group may lack one
            written.append(pivot)
            lines += ["", f"## {r.task} by {col}", "", f"| {col} | n | " + " | ".join(names) + " |"]
            lines.append("|---|---:|" + "---:|" * len(names))
            for g, mvs in groups.items():
                n = next(iter(mvs.values())).n if mvs else 0
                cells = (_fmt(mvs[m].value) if m in mvs else "" for m in names)
                lines.append(f"| {g} | {n} | " + " | ".join(cells) + " |")
    md = summary_dir / "summary.md"
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    written.append(md)
    return written
