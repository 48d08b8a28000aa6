"""The "against the previous run" section of a run's report, from the ``comparison.json`` its session wrote."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from lmmbench.reports.svg_charts import forest_chart

__all__ = ["previous_run_section"]


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _not_comparable(data: dict[str, Any]) -> str:
    differs = "; ".join(str(d) for d in data.get("workload_differences") or []) or "its workload"
    return ("<h2>Against the previous run</h2>\n<p>No comparable earlier run: the newest of this name "
            f"(<code>{_e(data.get('newest_of_name'))}</code>) measured another workload; it differs in: "
            f"{_e(differs)}. Nothing was compared.</p>\n")


def _summary(data: dict[str, Any], flagged: list[dict[str, Any]]) -> str:
    base = data.get("baseline") or {}
    which = "the baseline" if base.get("chosen") == "--baseline" else "the previous run"
    head = f"Against {which} <code>{_e(base.get('run_id'))}</code> ({_e(base.get('started_at'))})"
    out = ""
    if data.get("workload_differences"):
        out += (f"<p><b>{which.capitalize()} measured another workload</b>; it differs in: "
                f"{_e('; '.join(str(d) for d in data['workload_differences']))}.</p>")
    compared = data.get("metrics_compared")
    if compared == 0 or data.get("regressions") is None:
        return out + f"<p>{head}: <b>no metric compared</b> (the two runs share no measured metric).</p>"
    return out + (f"<p>{head}: <b>{data.get('regressions', 0)} regression(s), {data.get('improvements', 0)} "
                  f"improvement(s)</b> over {_e(compared)} metric(s) compared"
                  + ("" if flagged else " — no change beyond its interval and threshold") + ".</p>")


def previous_run_section(run_dir: Path) -> str:
    """Verdict lines and a forest chart of every compared change; empty when the run has no earlier run of its
    name; a line saying so when none of them measured this run's workload."""
    path = run_dir / "comparison.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not data.get("baseline"):
        return _not_comparable(data)
    metrics = [m for m in data.get("metrics") or [] if m.get("change") is not None]
    flagged = [m for m in metrics if m.get("verdict") in ("regression", "improvement")]
    colors = {"regression": "#c03b3b", "improvement": "#2e9e5b"}
    lines = []
    for m in flagged:
        ci = "" if m.get("ci_low") is None else f" [{m['ci_low']:+.1f}, {m['ci_high']:+.1f}]"
        lines.append(f"<li><b style='color:{colors[m['verdict']]}'>{_e(m['verdict'])}</b>: {_e(m['group'])} "
                     f"{_e(m['metric'])} ({_e(m['statistic'])}) {m['change']:+.1f} {_e(m['unit'])}{_e(ci)}</li>")
    body = _summary(data, flagged) + (f"<ul>{''.join(lines)}</ul>" if lines else "")
    if data.get("config_diff"):
        diffs = ", ".join(f"{_e(k)}: {_e(a)} → {_e(b)}" for k, a, b in data["config_diff"][:8])
        body += f"<p class='meta'>config differences: {diffs}</p>"
    rows = [(f"{m['group']} {m['metric']} {m['statistic']}", float(m["change"]), m.get("ci_low"), m.get("ci_high"),
             str(m.get("verdict"))) for m in metrics[:30]]  # fmt: skip
    if rows:
        body += forest_chart("Change against the previous run (95 % interval)", rows)
    return f"<h2>Against the previous run</h2>\n{body}\n"
