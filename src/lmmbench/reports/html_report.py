"""report.html: one self-contained page per run (inline CSS, plots embedded as base64 data URIs).

Built from the files the run already wrote (run.json, the summary CSV, the analysis JSON, the PNG
plots), so it can be rebuilt at any time and never sees anything the files do not hold. Every
string from a config, a label, a model name or a file is escaped. Writers are registered in
``REPORT_WRITERS``; ``write_reports`` calls each and turns a failure into a logged warning, so a
report that cannot be written never fails or loses a run.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from lmmbench.core.registry import Registry
from lmmbench.core.runs.summaries import perf_headline, spec_headline
from lmmbench.core.ttft_names import upgrade_breakdown_row
from lmmbench.reports import breakdown_glance as breakdown
from lmmbench.reports import html_sections as sections_of
from lmmbench.reports.previous_section import previous_run_section
from lmmbench.reports.svg_charts import CHART_CSS, CHART_SCRIPT
from lmmbench.reports.ttft_study import comparison_html

__all__ = ["REPORT_WRITERS", "HtmlReport", "ReportWriter", "format_value", "render_page", "render_table",
           "write_html", "write_reports"]

log = logging.getLogger(__name__)

RunKind = Literal["spec", "perf", "eval"]

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
main{max-width:1200px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dde5;padding-bottom:4px}
h3{font-size:14px;margin:16px 0 6px}.meta{color:#5b6678;margin:0 0 12px}
.box{background:#fff;border:1px solid #d8dde5;border-radius:6px;padding:12px;overflow-x:auto}
table{border-collapse:collapse;font-size:12.5px;font-variant-numeric:tabular-nums;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #e1e5eb;padding:3px 7px;text-align:right;white-space:nowrap;vertical-align:top}
th{background:#eef1f5;position:sticky;top:0}td.k,th.k{text-align:left}
tr:nth-child(even) td{background:#fafbfc}img{max-width:100%;height:auto;display:block;margin:8px 0}
details{margin:8px 0}summary{cursor:pointer;font-weight:600}.warn{color:#a4262c}
td>.box{max-width:calc(100vw - 300px)}
pre{white-space:pre-wrap;word-break:break-word;font-size:12px;margin:0}
"""

_PERF_COLUMNS = ("point", "rate", "concurrency", "input_tokens", "output_tokens", "requests", "ok", "errors",
                 "not_sent", "qps", "output_token_throughput", "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99",
                 "tpot_ms_mean", "tpot_ms_p99", "itl_ms_mean", "e2e_ms_mean", "e2e_ms_p99", "lateness_ms_p99",
                 "slo_attainment", "errors_by_kind",
                 # server-side metrics (lmmbench serve / proxy) and the time outside the server, when measured
                 "server_ttft_ms_p50", "client_minus_server_ttft_ms_p50", "client_minus_server_ttft_ms_std",
                 "client_minus_server_e2e_ms_p50", "client_minus_server_e2e_ms_std")  # fmt: skip


class ReportWriter(Protocol):
    """Writes a report of a finished run folder; returns the file it wrote."""

    def spec_run(self, spec_dir: Path, spec_name: str) -> Path:
        """Report of ``lmmbench run <spec>`` (``<out-dir>/<spec>``)."""

    def perf_run(self, run_dir: Path) -> Path:
        """Report of ``lmmbench perf`` (``<out-dir>/perf/<run-name>``)."""

    def eval_run(self, run_dir: Path) -> Path:
        """Report of ``lmmbench eval`` (``<out-dir>/<timestamp>``)."""


REPORT_WRITERS: Registry[ReportWriter] = Registry("report_writers")


def write_reports(kind: RunKind, folder: Path, spec_name: str = "") -> list[Path]:
    """Run every registered writer on ``folder``; a failing writer is logged and skipped."""
    files: list[Path] = []
    for name in REPORT_WRITERS.names():
        try:
            writer = REPORT_WRITERS.get(name)
            if kind == "spec":
                files.append(writer.spec_run(folder, spec_name))
            elif kind == "perf":
                files.append(writer.perf_run(folder))
            elif hasattr(writer, "eval_run"):  # writers from before eval reports may lack it
                files.append(writer.eval_run(folder))
        except Exception as exc:  # a report must never fail or lose the run
            log.warning("report writer %r could not write its report in %s: %s", name, folder, exc)
    return files


def format_value(value: Any) -> str:
    """How a cell shows a value: numbers to 4 significant digits, integers as they are, escaped."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return html.escape(str(value).lower())
    num: float | None = None
    if isinstance(value, (int, float)):
        num = float(value)
    elif isinstance(value, str) and value.strip():
        try:
            num = float(value)
        except ValueError:
            num = None
    if num is None:
        return html.escape(str(value))
    if math.isnan(num) or math.isinf(num):
        return html.escape(str(num))
    if num.is_integer() and abs(num) < 1e15:
        return str(int(num))
    return f"{num:.4g}"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, key_cols: int = 1) -> str:
    if not rows:
        return "<p class='meta'>(none)</p>"
    cols = list(columns) if columns else list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th class='{'k' if i < key_cols else ''}'>{_e(c)}</th>" for i, c in enumerate(cols))
    body = []
    for r in rows:
        cells = []
        for i, c in enumerate(cols):
            v = r.get(c)
            text = format_value(v) if not isinstance(v, (dict, list)) else _e(json.dumps(v, default=str))
            cells.append(f"<td class='{'k' if i < key_cols else ''}'>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<div class='box'><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"


def _mapping(obj: Any, depth: int = 0) -> str:
    """A nested dict as nested two-column tables; a dict of dicts as one table; anything else escaped."""
    if isinstance(obj, dict):
        if not obj:
            return "<span class='meta'>(empty)</span>"
        if depth < 3 and all(isinstance(v, dict) for v in obj.values()) and len(obj) > 1:
            subkeys = list(dict.fromkeys(k for v in obj.values() for k in v))
            if all(not isinstance(x, dict) for v in obj.values() for x in v.values()) and len(subkeys) <= 40:
                return _table([{"name": k, **v} for k, v in obj.items()], ["name", *subkeys])
        rows = "".join(f"<tr><th class='k'>{_e(k)}</th><td class='k'>{_mapping(v, depth + 1)}</td></tr>"
                       for k, v in obj.items())  # fmt: skip
        return f"<table>{rows}</table>"
    if isinstance(obj, list):
        if obj and all(isinstance(x, dict) for x in obj):
            return _table(obj)
        return _e(json.dumps(obj, default=str))
    return format_value(obj)


def _section(title: str, body: str) -> str:
    return f"<h2>{_e(title)}</h2>\n{body}\n"


def _images(paths: Iterable[Path]) -> str:
    parts = []
    for p in paths:
        if p.is_file() and p.stat().st_size > 0:
            data = base64.b64encode(p.read_bytes()).decode("ascii")
            parts.append(f"<h3>{_e(p.name)}</h3><img alt='{_e(p.name)}' src='data:image/png;base64,{data}'>")
    return "<div class='box'>" + "".join(parts) + "</div>" if parts else "<p class='meta'>(no plots)</p>"


def _page(title: str, meta: str, sections: Sequence[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width,initial-scale=1'>"
            f"<title>{_e(title)}</title><style>{_CSS}{CHART_CSS}</style></head>\n<body><main>\n"
            f"<h1>{_e(title)}</h1><p class='meta'>{meta}</p>\n{''.join(sections)}</main>"
            f"<script id='lmmbench-charts'>{CHART_SCRIPT}</script></body></html>\n")  # fmt: skip


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _read_csv(path: Path) -> list[dict[str, str]]:
    """Rows of a CSV; results rows of old TTFT breakdowns come in today's names (``upgrade_breakdown_row``)."""
    if not path.is_file():
        return []
    from lmmbench.core.csv_rows import csv_rows

    return [upgrade_breakdown_row(r) for r in csv_rows(path.read_text(encoding="utf-8"))]


def render_page(title: str, meta_html: str, sections: Sequence[str]) -> str:
    """A whole self-contained page (inline CSS, the charts' script); ``meta_html`` is already escaped."""
    return _page(title, meta_html, sections)


def render_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, key_cols: int = 1) -> str:
    """An HTML table of ``rows`` (cells escaped, numbers formatted)."""
    return _table(rows, columns, key_cols)


def write_html(path: Path, text: str) -> Path:
    """Write a page atomically (never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return _write(path, text)


def _spec_headline(spec_dir: Path, spec_name: str) -> dict[str, float | None]:
    return spec_headline(_read_csv(spec_dir / f"{spec_name}_results.csv"))


def _write(path: Path, text: str) -> Path:
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # never a half-written report
    return path


class HtmlReport:
    """The built-in writer: ``report.html`` next to the run's other files."""

    def spec_run(self, spec_dir: Path, spec_name: str) -> Path:
        """Title, model, status; analysis (findings, fits); plot; summary; config; environment."""
        run = _read_json(spec_dir / "run.json")
        analysis = _read_json(spec_dir / f"{spec_name}_analysis.json")
        summary = _read_csv(spec_dir / f"{spec_name}_summary.csv")
        config = run.get("config", {})
        model = config.get("model", "")
        stats = run.get("outcome") or run.get("stats") or {}
        meta = (f"model <b>{_e(model)}</b> &middot; {_e(run.get('started_at', ''))} &rarr; "
                f"{_e(run.get('finished_at', ''))} &middot; {format_value(stats.get('ok'))} measured, "
                f"{format_value(stats.get('failed'))} failed"
                + (" &middot; <span class='warn'>interrupted</span>" if stats.get("interrupted") else "")
                + (" &middot; <span class='warn'>RANDOM WEIGHTS (shape-only model)</span>"
                   if (run.get("measurement") or {}).get("random_weights") or run.get("random_weights")
                   else ""))  # fmt: skip
        fits = analysis.get("fits", {})
        stages = [str(r.get("field")) for r in summary if r.get("level") == "all"]
        sections = self._spec_top(spec_dir, spec_name, run, analysis, summary, stages)
        sections.insert(1, previous_run_section(spec_dir))
        shown = ("fits", "fits_by_basis", "failures", "spec", "ttft_study_comparison")  # the last one: its own table
        findings = {k: v for k, v in analysis.items() if k not in shown}
        sections.append(_section("Fits", _mapping(fits) if fits else "<p class='meta'>(none)</p>"))
        sections.append(_section("Findings", _mapping(findings)))
        if analysis.get("failures"):
            sections.append(_section("Failures", _mapping(analysis["failures"])))
        sections.append(_section("Plot", _images(sorted(spec_dir.glob("*.png")))))
        top = [r for r in summary if r.get("level") == "all"] or summary[:50]
        rest = [r for r in summary if r not in top]
        body = _table(top, key_cols=3)
        if rest:
            body += (f"<details><summary>groups and samples ({len(rest)} rows)</summary>"
                     f"{_table(rest, key_cols=3)}</details>")
        sections.append(_section("Summary", body))
        sections.append(_section("Config", _mapping(config)))
        skip = ("config", "stats", "outcome", "spec", "schema_version", "files")
        env = {k: v for k, v in run.items() if k not in skip}
        sections.append(_section("Environment and run", _mapping(env)))
        return _write(spec_dir / "report.html", _page(f"lmmbench run {spec_name}: {model}", meta, sections))

    @staticmethod
    def _spec_top(spec_dir: Path, spec_name: str, run: dict[str, Any], analysis: dict[str, Any],
                  summary: list[dict[str, str]], stages: list[str]) -> list[str]:
        """Headline and charts: a TTFT breakdown answers "where does the time go" first; an episodic run
        leads with its success rate and speed-up; other specs show their headline numbers."""
        rows = _read_csv(spec_dir / f"{spec_name}_results.csv")
        verdicts = sections_of.spec_verdicts(run, analysis)
        if breakdown.is_breakdown(rows):  # raw field names stay in the tables below
            top = breakdown.breakdown_headline(rows) + sections_of.verdict_list(verdicts)
            glance = [breakdown.stage_stack_chart(rows), breakdown.stage_summary_chart(summary)]
            return [top, sections_of.charts_block(glance), comparison_html(analysis.get("ttft_study_comparison"))]
        headline = run.get("headline") or _spec_headline(spec_dir, spec_name)
        lead = sections_of.episodic_cards(analysis)
        shown = ("success_", "speedup_vs_serial_") if lead else ()  # the lead cards show them, with their intervals
        return [sections_of.headline_section(headline, verdicts, first=("success", "speed", "episodes"),
                                             lead_cards=lead, shown=shown),
                sections_of.spec_charts(summary, stages)]

    def perf_run(self, run_dir: Path) -> Path:
        """Title, model; the summary of every point; search verdict; plots; config; environment."""
        run = _read_json(run_dir / "run.json")
        report = _read_json(run_dir / "report.json")
        summary = _read_csv(run_dir / "summary.csv")
        model = report.get("Model") or run.get("config", {}).get("model") or ""
        env = run.get("environment", {})
        meta = (f"model <b>{_e(model)}</b> &middot; {_e(run.get('config', {}).get('url', ''))} &middot; "
                f"{len(summary)} point(s) &middot; {_e(env.get('time_utc', ''))}")  # fmt: skip
        facts = run.get("run") or {}
        status = run.get("status") or facts.get("status")
        if status in ("interrupted", "failed", "recovered"):  # the run did not end normally: say so
            meta += (f" &middot; <span class='warn'>{_e(status)}</span>, "
                     f"{format_value(facts.get('requests_measured', run.get('requests_measured')))} requests measured")
        headline = run.get("headline") or perf_headline(summary)
        sections = [sections_of.headline_section(headline, sections_of.perf_verdicts(run, report, summary)),
                    previous_run_section(run_dir), sections_of.perf_charts(run_dir, summary)]
        search = report.get("search")
        if isinstance(search, dict):
            sections.append(_section("Search", f"<p><b>{_e(search.get('verdict', ''))}</b></p>"
                                               + _mapping({k: v for k, v in search.items() if k != "verdict"})))
        cols = [c for c in _PERF_COLUMNS if any(c in r for r in summary)]
        first = list(summary[0]) if summary else []
        settings = first[: first.index("requests")] if "requests" in first else []
        extra = [c for c in settings if c not in cols]  # the user's labels (tp, batch, ...)
        body = _table(summary, [*cols[:5], *extra, *cols[5:]], key_cols=1)
        if summary:
            body += f"<details><summary>every column</summary>{_table(summary)}</details>"
        sections.append(_section("Summary per point (ms, req/s, tok/s)", body))
        sections.append(_section("Plots", _images(sorted(run_dir.glob("*.png")))))
        sections.append(_section("Config", _mapping(run.get("config", {}))))
        if run.get("points"):
            sections.append(_section("Points", _mapping(run["points"])))
        sections.append(_section("Environment", _mapping(env)))
        if run.get("measurement"):
            sections.append(_section("How it measured", _mapping(run["measurement"])))
        return _write(run_dir / "report.html", _page(f"lmmbench perf: {model}", meta, sections))

    def eval_run(self, run_dir: Path) -> Path:
        """Headline accuracies and failures; score per task and group with intervals; summary; config."""
        run = _read_json(run_dir / "run.json")
        results = [_read_json(p) for p in sorted((run_dir / "results").glob("*.json"))]
        results = [r for r in results if r.get("metrics")]
        config = run.get("config", {})
        model = run.get("model") or config.get("model") or ""
        meta = (f"model <b>{_e(model)}</b> &middot; {len(results)} task(s) &middot; "
                f"{_e(run.get('started_at', ''))} &rarr; {_e(run.get('finished_at', ''))}")  # fmt: skip
        sections = [sections_of.eval_headline_section(results, sections_of.eval_verdicts(run)),
                    previous_run_section(run_dir), sections_of.eval_charts(results)]
        rows = [{"task": r.get("task"), "metric": name, "value": mv.get("value"), "stderr": mv.get("stderr"),
                 "n": mv.get("n"), "samples": r.get("n_samples"), "failed": r.get("n_errors")}
                for r in results for name, mv in (r.get("metrics") or {}).items()]  # fmt: skip
        sections.append(_section("Scores", _table(rows, key_cols=2)))
        for r in results:
            for col, groups in (r.get("groups") or {}).items():
                grows = [{col: g, **{m: mv.get("value") for m, mv in ms.items()}} for g, ms in groups.items()]
                sections.append(_section(f"{r.get('task')} by {col}", _table(grows)))
        sections.append(_section("Config", _mapping(config)))
        if run.get("measurement"):
            sections.append(_section("How it measured", _mapping(run["measurement"])))
        sections.append(_section("Environment", _mapping(run.get("environment", {}))))
        return _write(run_dir / "report.html", _page(f"lmmbench eval: {model}", meta, sections))


REPORT_WRITERS.add("html", HtmlReport())
