"""Summaries (VLMHyperBench's MetricAggregator): one table of every task's metrics, and pivots by group.

``summary/summary.csv`` and ``summary/summary.md`` hold one row per (task, metric): value, standard
error, samples, errors. ``summary/<task>_by_<column>.csv`` is the pivot of a group column: one row
per group value, one column per metric. A joint grouping ``a+b`` (``--group-by a+b``; ``a,b`` stays two
separate groupings) gives ``<task>_by_a+b.csv`` with one row per pair of values (columns ``a, b, n``, the
metrics) and, in ``summary.md``, the cross table of each metric: one row per value of ``a``, one column
per value of ``b`` (``n`` per cell in its own table).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

from lmmbench.evaluation.evaluate import TaskResult
from lmmbench.metrics.accuracy import MetricValue

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
            if "+" in col:
                written.append(_joint(r, col, groups, summary_dir, lines))
                continue
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


def _split_key(key: str, n: int) -> list[str]:
    parts = key.split("+")
    return parts if len(parts) == n else [key, *[""] * (n - 1)]  # a value that holds '+' itself: kept whole


def _joint(r: TaskResult, col: str, groups: dict[str, dict[str, MetricValue]], summary_dir: Path,
           lines: list[str]) -> Path:  # fmt: skip
    """The pivot CSV of a joint grouping and its cross tables (appended to ``lines``); returns the CSV."""
    parts = col.split("+")
    names = list(r.metrics)
    pivot = summary_dir / f"{r.task}_by_{col}.csv"
    with pivot.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*parts, "n", *names])
        for g, mvs in groups.items():
            n = next(iter(mvs.values())).n if mvs else 0
            w.writerow([*_split_key(g, len(parts)), n, *(repr(mvs[m].value) if m in mvs else "" for m in names)])
    if len(parts) != 2:  # three or more columns: the long table only
        return pivot
    cells = {tuple(_split_key(g, 2)): mvs for g, mvs in groups.items()}
    rows_, cols_ = sorted({a for a, _ in cells}), sorted({b for _, b in cells})
    for metric in [*names, "n"]:
        lines += ["", f"## {r.task}: {metric} by {parts[0]} × {parts[1]}", "",
                  f"| {parts[0]} / {parts[1]} | " + " | ".join(cols_) + " |", "|---|" + "---:|" * len(cols_)]
        for a in rows_:
            vals = []
            for b in cols_:
                cell = cells.get((a, b))
                if cell is None:
                    vals.append("")  # no sample has this pair: empty, never 0
                elif metric == "n":
                    vals.append(str(next(iter(cell.values())).n if cell else 0))
                else:
                    vals.append(_fmt(cell[metric].value) if metric in cell else "")
            lines.append(f"| {a} | " + " | ".join(vals) + " |")
    return pivot
