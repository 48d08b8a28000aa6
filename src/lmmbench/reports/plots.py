"""The plot: stacked stage bars per sample (medians), and stage time against token count with fits."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmmbench.metrics.fits import linear_fit
from lmmbench.reports.summary import per_sample_medians

__all__ = ["plot_breakdown"]


def plot_breakdown(
    rows: list[dict[str, Any]],
    stage_fields: Sequence[str],
    fit_pairs: Sequence[tuple[str, str]],
    path: Path,
    title: str = "",
    fit_stat: str = "median",
    preprocess_fields: Sequence[str] = (),
) -> Path | None:
    """Write the PNG; returns None when there is no successful row to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fields = list(dict.fromkeys([*stage_fields, *preprocess_fields, *(p for pair in fit_pairs for p in pair)]))
    med = per_sample_medians(rows, fields)
    pts_by_sample = per_sample_medians(rows, fields, stat=fit_stat)
    if not med:
        return None
    fits = [(y, x) for y, x in fit_pairs
            if sum(1 for m in med.values() if math.isfinite(m[x]) and m[x] > 0) >= 2]
    ncols = 3
    bar_rows = 2 if preprocess_fields else 1
    nrows = bar_rows + math.ceil(len(fits) / ncols)
    fig = plt.figure(figsize=(15, 4.5 * nrows))
    grid = fig.add_gridspec(nrows, ncols)
    ids = list(med)
    _stacked(fig.add_subplot(grid[0, :]), ids, med, stage_fields, title or "stage breakdown per sample")
    if preprocess_fields:
        _stacked(fig.add_subplot(grid[1, :]), ids, med, preprocess_fields, "preprocessing (CPU, before TTFT)")
    for k, (y, x) in enumerate(fits):
        sub = fig.add_subplot(grid[bar_rows + k // ncols, k % ncols])
        pts = [(m[x], m[y]) for m in pts_by_sample.values()
               if math.isfinite(m[x]) and m[x] > 0 and math.isfinite(m[y])]
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        sub.scatter(xs, ys, s=18)
        fit = linear_fit(xs, ys)
        if math.isfinite(fit.slope):
            sub.plot([fit.x_min, fit.x_max], [fit.predict(fit.x_min), fit.predict(fit.x_max)], color="C3",
                     label=f"{fit.slope:.4g} ms/unit, R²={fit.r2:.3f}")
            sub.legend(fontsize=8)
        sub.set_xlabel(x)
        sub.set_ylabel(f"{y} ({fit_stat} of repeats)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _stacked(ax: Any, ids: list[str], med: dict[str, dict[str, Any]], fields: Sequence[str], title: str) -> None:
    import matplotlib.pyplot as plt

    bottom = [0.0] * len(ids)
    cmap = plt.get_cmap("tab20")
    for i, f in enumerate(fields):
        vals = [max(0.0, med[s][f]) if math.isfinite(med[s][f]) else 0.0 for s in ids]
        if not any(vals):
            continue
        ax.bar(ids, vals, bottom=bottom, label=f.removesuffix("_ms"), color=cmap(i % 20))
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("ms (median over repeats)")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=4, loc="upper left")
    ax.tick_params(axis="x", rotation=30, labelsize=8)
