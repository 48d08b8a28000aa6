"""The comparison page of `lmmbench runs report`: verdicts first, then charts, then the tables.

Self-contained like every report (inline CSS, SVG and script; nothing loaded from the network).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmmbench.reports.html_report import render_page, render_table, write_html
from lmmbench.reports.html_sections import headline_section
from lmmbench.reports.svg_charts import bar_chart, forest_chart

__all__ = ["write_comparison_page"]


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _runs(side: Sequence[Any]) -> str:
    return ", ".join(f"{r.stored.run_id} ({r.run_log.name}, {r.run_log.model or '?'})" for r in side)


def _one(result: Any, index: int) -> list[str]:
    regs, imps = result.regressions, result.improvements
    verdicts: list[tuple[str, bool | None]] = [
        (f"{g}: {m.metric} {m.statistic} {m.change:+.1f} {m.unit} [{m.ci_low:+.1f}, {m.ci_high:+.1f}]", False)
        for g, m in regs
    ]
    verdicts += [(f"{g}: {m.metric} {m.statistic} improved {m.change:+.1f} {m.unit}", True) for g, m in imps]
    if not regs:
        verdicts.insert(0, ("no regression beyond its threshold with an interval excluding zero", True))
    counts = {"regressions": float(len(regs)), "improvements": float(len(imps)), "metrics": float(len(result.metrics))}
    out = [f"<h2>Comparison {index + 1}</h2><p class='meta'>A (baseline): {_e(_runs(result.side_a))}<br>"
           f"B: {_e(_runs(result.side_b))}</p>", headline_section(counts, verdicts)]  # fmt: skip
    diffs = [{"what": k, "A": a, "B": b}
             for k, a, b in [*result.prompt_diff, *result.config_diff, *result.environment_diff]]
    out.append("<h3>Differences (metrics are compared on what the runs share)</h3>"
               + render_table(diffs))  # fmt: skip
    rows = [(f"{g} {m.metric} {m.statistic}", m.change, m.ci_low, m.ci_high, m.verdict) for g, m in result.metrics
            if math.isfinite(m.change)]  # fmt: skip
    charts = [forest_chart("Change B vs A with 95 % interval", rows)] if rows else []
    means = [m for _, m in result.metrics if m.statistic == "mean" and m.a and math.isfinite(m.a)][:12]
    if means:
        charts.append(bar_chart("Mean of B relative to A (A = 100)", [m.metric for m in means], {
            "A": [100.0] * len(means), "B": [100.0 * m.b / m.a for m in means]}))  # fmt: skip
    out.append("<h3>Charts</h3><p class='meta'>hover a mark for its value; click a legend entry to hide it</p>"
               f"<div class='charts'>{''.join(charts)}</div>")  # fmt: skip
    table = [{"group": g, "metric": m.metric, "statistic": m.statistic, "A": m.a, "B": m.b,
              "change": f"{m.change:+.2f} {m.unit}",
              "95% interval": "" if m.ci_low is None else f"[{m.ci_low:+.2f}, {m.ci_high:+.2f}]",
              "threshold": f"{m.threshold:g} {m.unit}", "verdict": m.verdict, "n A": m.n_a, "n B": m.n_b}
             for g, m in result.metrics]  # fmt: skip
    out.append("<h3>Every metric</h3>" + render_table(table, key_cols=3))
    if result.not_shared:
        out.append("<h3>Not compared</h3><ul>" + "".join(f"<li>{_e(n)}</li>" for n in result.not_shared) + "</ul>")
    return out


def write_comparison_page(results: Sequence[Any], out: Path) -> Path:
    """Write the page comparing each ``RunComparison`` of ``results``; returns its path."""
    sections: list[str] = []
    for i, result in enumerate(results):
        sections += _one(result, i)
    n_reg = sum(len(r.regressions) for r in results)
    meta = f"{len(results)} comparison(s) &middot; {n_reg} regression(s)"
    return write_html(out, render_page("lmmbench runs report", meta, sections))
