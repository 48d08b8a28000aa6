"""One report for a whole plan: ``plan_report.html`` and ``final_report.md``.

Each row's headline (accuracy of eval rows, TTFT / throughput of perf rows, the stage shares of a spec's
TTFT breakdown, episodic success and speed-up), charts across rows (accuracy per model and task, TTFT
against load, inline SVG as the run reports draw them), a link to each row's own report, and every
failed row with its cause; ``final_report.md`` references the same charts drawn as PNG files beside it
(``reports.plan_charts``). Numbers come from each row's ``status.json`` metrics and its run log's
headline (``run.json``); a number a row did not measure is left out, never drawn as zero. A folder that a later
row wrote into as well (a scoring stage that scores an inference row's predictions in place rewrites its
``run.json``) holds the later row's numbers: the earlier row is credited with its own metrics only.
"""

from __future__ import annotations

import csv
import html
import json
import os
from pathlib import Path
from typing import Any

from lmmbench.core.numbers import to_float
from lmmbench.reports.svg_charts import CHART_CSS, CHART_SCRIPT, bar_chart, line_chart

__all__ = ["folder_owners", "row_headline", "write_plan_reports"]

_PERF_KEYS = ("ttft_ms_mean", "ttft_ms_p99", "tpot_ms_mean", "qps", "output_token_throughput")
_EPISODIC_KEYS = ("success_rate", "episodes_per_s", "speedup_vs_serial_median")
_STAGES_TOTAL = "ttft_ms_median"
# the named stages of a TTFT breakdown (specs.ttft_breakdown): encoders, prefill, the rest of TTFT
_STAGES = ("visual_encoder", "audio_encoder", "prefill", "others")


def _run_log(folder: str | None) -> dict[str, Any]:
    if not folder:
        return {}
    path = Path(folder) / "run.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _accuracy(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        task, _, metric = key.rpartition(".")
        if task and metric != "n_samples" and "stderr" not in metric and (v := to_float(value)) is not None:
            out[key] = v
    return out


def _stage_shares(headline: dict[str, Any]) -> dict[str, float]:
    """Each named stage's median over the median TTFT of a breakdown spec (``<stage>_ms_median`` /
    ``ttft_ms_median``): where TTFT goes, as the run's own report says it in words."""
    total = to_float(headline.get(_STAGES_TOTAL))
    if not total:
        return {}
    out = {}
    for stage in _STAGES:
        v = to_float(headline.get(f"{stage}_ms_median"))
        if v is not None:
            out[f"{stage} share"] = v / total
    return out


def _folder_key(folder: Any) -> str | None:
    if not folder:
        return None
    try:
        return str(Path(str(folder)).resolve())
    except OSError:
        return str(folder)


def folder_owners(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Run folder -> the row that wrote it last (by end time, then plan order): its files hold that row's numbers."""
    owners: dict[str, str] = {}
    ran = [(i, r) for i, r in enumerate(rows) if r.get("status") in ("ok", "interrupted")]
    for _i, r in sorted(ran, key=lambda ir: (to_float(ir[1].get("ended_at_s")) or 0.0, ir[0])):
        key = _folder_key(r.get("folder"))
        if key is not None:
            owners[key] = r["name"]
    return owners


def row_headline(row: dict[str, Any], owners: dict[str, str] | None = None) -> dict[str, float]:
    """The few numbers that say what a row measured (empty for a failed row; an interrupted row's measured part).
    ``owners`` (``folder_owners`` of the plan): a row whose folder a later row rewrote reads no file of it."""
    if row.get("status") not in ("ok", "interrupted"):
        return {}
    metrics = row.get("metrics") or {}
    key = _folder_key(row.get("folder"))
    own = owners is None or key is None or owners.get(key, row["name"]) == row["name"]
    headline = (_run_log(row.get("folder")).get("headline") or {}) if own else {}
    kind = row.get("kind")
    if kind == "eval":
        return _accuracy(metrics) or _accuracy(headline)
    if kind == "perf":
        merged = {**headline, **metrics}
        return {k: v for k in _PERF_KEYS if (v := to_float(merged.get(k))) is not None}
    if kind == "run":
        out = {k: v for k in (*_EPISODIC_KEYS, _STAGES_TOTAL) if (v := to_float(headline.get(k))) is not None}
        return {**out, **_stage_shares(headline)}
    return {}


def _perf_points(row: dict[str, Any], owners: dict[str, str]) -> list[tuple[float, float]]:
    """(offered load, mean TTFT) per load point of a perf row, from its summary.csv."""
    folder = row.get("folder")
    key = _folder_key(folder)
    if not folder or not (Path(folder) / "summary.csv").is_file() or owners.get(key or "", row["name"]) != row["name"]:
        return []
    points = []
    with (Path(folder) / "summary.csv").open(newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            load = to_float(r.get("rate")) or to_float(r.get("concurrency")) or to_float(r.get("qps"))
            ttft = to_float(r.get("ttft_ms_mean"))
            if load is not None and ttft is not None:
                points.append((load, ttft))
    return sorted(points)


def _report_link(row: dict[str, Any], plan_dir: Path) -> str | None:
    folder = row.get("folder")
    if not folder:
        return None
    target = Path(folder)
    target = target / "report.html" if (target / "report.html").is_file() else target
    try:
        return os.path.relpath(target, plan_dir)
    except ValueError:
        return str(target)


def _chart_data(rows: list[dict[str, Any]], heads: dict[str, dict[str, float]]
                ) -> tuple[tuple[list[str], dict[str, list[float | None]]], dict[str, list[tuple[float, float]]]]:
    """(accuracy keys, series per eval row) and TTFT-against-load curves per perf row."""
    evals = [r for r in rows if r.get("kind") == "eval" and heads.get(r["name"])]
    keys = list(dict.fromkeys(k for r in evals for k in heads[r["name"]]))
    series = {f"{r.get('model') or r['name']} ({r['name']})": [heads[r["name"]].get(k) for k in keys]
              for r in evals}  # fmt: skip
    owners = folder_owners(rows)
    curves = {r["name"]: pts for r in rows if r.get("kind") == "perf" and (pts := _perf_points(r, owners))}
    return (keys, series), curves


def _charts(rows: list[dict[str, Any]], heads: dict[str, dict[str, float]]) -> list[str]:
    charts = []
    (keys, series), curves = _chart_data(rows, heads)
    if keys:
        charts.append(bar_chart("Accuracy per model and task", keys, series, y_label="score"))
    if curves:
        charts.append(line_chart("TTFT against load", curves, x_label="offered load (req/s or concurrency)",
                                 y_label="mean TTFT (ms)"))  # fmt: skip
    return [c for c in charts if c]


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _headline_text(head: dict[str, float]) -> str:
    return ", ".join(f"{k} {_fmt(v)}" for k, v in head.items())


def _html(title: str, rows: list[dict[str, Any]], heads: dict[str, dict[str, float]], links: dict[str, str | None],
          charts: list[str]) -> str:  # fmt: skip
    e = html.escape
    body = []
    for r in rows:
        link = links.get(r["name"])
        name = f"<a href='{e(link)}'>{e(r['name'])}</a>" if link else e(r["name"])
        note = r.get("error") or r.get("contention") or ""
        body.append(f"<tr class='{e(str(r.get('status')))}'><td>{name}</td><td>{e(str(r.get('kind')))}</td>"
                    f"<td>{e(str(r.get('model') or ''))}</td><td>{e(str(r.get('status')))}</td>"
                    f"<td>{e(_headline_text(heads.get(r['name'], {})))}</td><td>{e(note)}</td></tr>")  # fmt: skip
    failures = [f"<li><b>{e(r['name'])}</b>: {e(r.get('error') or 'failed')}</li>" for r in rows
                if r.get("status") == "failed"]  # fmt: skip
    fail_html = f"<h2>Failures</h2><ul>{''.join(failures)}</ul>" if failures else ""
    charts_html = f"<h2>Across rows</h2><div class='charts'>{''.join(charts)}</div>" if charts else ""
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + e(title) + "</title><style>"
            "body{font-family:system-ui,sans-serif;margin:24px;color:#1d2430}table{border-collapse:collapse}"
            "td,th{border:1px solid #d8dde5;padding:4px 8px;font-size:13px;vertical-align:top}"
            "tr.failed{background:#fdecec}tr.interrupted{background:#fff6e0}" + CHART_CSS + "</style></head><body>"
            f"<h1>{e(title)}</h1><p>{e(_counts(rows))}.</p>"
            "<table><thead><tr><th>row</th><th>kind</th><th>model</th><th>status</th><th>headline</th>"
            f"<th>cause / note</th></tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"{charts_html}{fail_html}<script>{CHART_SCRIPT}</script></body></html>\n")  # fmt: skip


def _counts(rows: list[dict[str, Any]]) -> str:
    """``N of M rows ok``, then the failed, the skipped (a needed row did not succeed) and the interrupted (what
    they measured is kept), each counted apart."""
    count = {s: sum(1 for r in rows if r.get("status") == s) for s in ("ok", "failed", "skipped", "interrupted")}
    return (f"{count['ok']} of {len(rows)} rows ok, {count['failed']} failed, {count['skipped']} skipped"
            + (f", {count['interrupted']} interrupted (what they measured is kept)" if count["interrupted"] else ""))


def _markdown(title: str, rows: list[dict[str, Any]], heads: dict[str, dict[str, float]],
              links: dict[str, str | None], pngs: list[tuple[str, str]] | None) -> str:  # fmt: skip
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [f"# {title}", "", f"{_counts(rows)}. Charts across rows: plan_report.html.", "",
             "| row | kind | model | status | headline | report |", "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        link = links.get(r["name"])
        lines.append(f"| {cell(r['name'])} | {r.get('kind')} | {cell(str(r.get('model') or ''))} | {r.get('status')} "
                     f"| {cell(_headline_text(heads.get(r['name'], {})))} | {f'[report]({link})' if link else ''} |")
    if pngs:
        lines += ["", "## Charts", ""] + [f"![{t}]({f})" for t, f in pngs]
    elif pngs is None:
        lines += ["", "No PNG charts: matplotlib is not installed (pip install 'lmmbench[plots]')."]
    contended = [r for r in rows if r.get("contention")]
    if contended:
        lines += ["", "## Contention", ""] + [f"- **{r['name']}**: {cell(r['contention'])}" for r in contended]
    skipped = [r for r in rows if r.get("status") == "skipped"]  # a stage whose needed row did not succeed
    if skipped:
        lines += ["", "## Skipped", ""] + [f"- **{r['name']}** ({r.get('kind')}): {cell(r.get('error') or '')}"
                                            for r in skipped]  # fmt: skip
    failed = [r for r in rows if r.get("status") == "failed"]
    if failed:
        lines += ["", "## Failures", ""] + [f"- **{r['name']}** ({r.get('kind')}): {cell(r.get('error') or 'failed')}"
                                             for r in failed]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_plan_reports(rows: list[dict[str, Any]], plan_dir: Path, title: str) -> tuple[Path, Path]:
    """Write ``plan_report.html`` and ``final_report.md`` into ``plan_dir``; returns both paths."""
    owners = folder_owners(rows)
    heads = {r["name"]: row_headline(r, owners) for r in rows}
    links = {r["name"]: _report_link(r, plan_dir) for r in rows}
    html_path = plan_dir / "plan_report.html"
    html_path.write_text(_html(title, rows, heads, links, _charts(rows, heads)), encoding="utf-8")
    md_path = plan_dir / "final_report.md"
    from lmmbench.reports.plan_charts import write_report_charts

    md_path.write_text(_markdown(title, rows, heads, links, write_report_charts(*_chart_data(rows, heads), plan_dir)),
                       encoding="utf-8")  # fmt: skip
    return html_path, md_path
