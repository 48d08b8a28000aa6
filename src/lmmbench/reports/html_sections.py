"""The top of every report page: headline numbers and verdicts, then interactive charts per run kind.

Built only from the files a run wrote (run.json, summary CSVs, records, eval results); a number a
run did not measure is not shown.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmmbench.reports.svg_charts import bar_chart, line_chart

__all__ = ["episodic_cards", "eval_charts", "eval_headline_section", "eval_verdicts", "headline_section", "perf_charts",
           "perf_verdicts", "readable", "spec_charts", "spec_verdicts", "verdict_list"]  # fmt: skip

Verdict = tuple[str, bool | None]  # text, met (True), missed (False), information (None)

_CARD_CSS = ("display:inline-block;min-width:130px;margin:0 8px 8px 0;padding:8px 12px;background:#fff;"
             "border:1px solid #d8dde5;border-radius:6px")  # fmt: skip


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _fmt(v: float) -> str:
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.4g}"


_WORDS = {"qps": "requests / s (qps)", "output_token_throughput": "output tokens / s", "ttft": "TTFT", "tpot": "TPOT",
          "itl": "inter-token latency", "e2e": "end-to-end latency", "errors": "failed requests",
          "wall": "wall time per episode", "env": "environment steps", "planning": "planning",
          "action": "action (policy forward)", "episodes_per_s": "episodes / s"}  # fmt: skip
_STATISTICS = {"median": "median", "mean": "mean", "p50": "median", "p90": "p90", "p95": "p95", "p99": "p99"}
_UNITS = {"ms": "ms", "s": "s", "pct": "%"}


def readable(key: str) -> str:
    """A headline key in words (``ttft_ms_p99`` -> ``TTFT, p99 (ms)``); the raw key stays in the tables and in the
    card's tooltip. A ``[point N]`` suffix is kept."""
    base, _, point = key.partition(" [")
    if base in _WORDS:
        return _WORDS[base] + (f" [{point}" if point else "")
    parts = base.split("_")
    stat = _STATISTICS.get(parts[-1]) if len(parts) > 1 else None
    parts = parts[:-1] if stat else parts
    unit = _UNITS.get(parts[-1]) if len(parts) > 1 else None
    parts = parts[:-1] if unit else parts
    name = _WORDS.get("_".join(parts), " ".join(parts))
    text = name + (f", {stat}" if stat else "") + (f" ({unit})" if unit else "")
    return text + (f" [{point}" if point else "")


def _card(label: str, value: str, note: str = "", raw: str = "") -> str:
    sub = f"<div class='meta'>{_e(note)}</div>" if note else ""
    tip = f" title='{_e(raw)}'" if raw else ""
    return (f"<div class='card' style='{_CARD_CSS}'{tip}><div class='meta'>{_e(label)}</div>"
            f"<div style='font-size:20px;font-weight:600'>{_e(value)}</div>{sub}</div>")  # fmt: skip


def verdict_list(verdicts: Sequence[Verdict]) -> str:
    """The verdict lines: a check for a goal met, a cross for one missed, a dot for information."""
    marks = {True: ("&#10003;", "#2e9e5b"), False: ("&#10007;", "#c03b3b"), None: ("&#8226;", "#5b6678")}
    lines = []
    for text, met in verdicts:
        sym, color = marks[met]
        lines.append(f"<li class='verdict' style='list-style:none'><span style='color:{color};font-weight:700'>"
                     f"{sym}</span> {_e(text)}</li>")  # fmt: skip
    return f"<ul style='padding-left:4px'>{''.join(lines)}</ul>" if lines else ""


def headline_section(headline: dict[str, Any], verdicts: Sequence[Verdict], limit: int = 12,
                     first: Sequence[str] = (), lead_cards: Sequence[str] = (), shown: Sequence[str] = ()) -> str:
    """``lead_cards``, then cards with the headline numbers in words (keys containing one of ``first`` lead; keys
    starting with one of ``shown`` are left out: the lead cards show them), then the verdict lines."""
    keys = sorted((k for k in headline if not k.startswith(tuple(shown))),
                  key=lambda k: next((i for i, f in enumerate(first) if f in k), len(first)))  # fmt: skip
    cards = [*lead_cards, *(_card(readable(k), _fmt(v), raw=k) for k in keys[:limit]
                            if (v := _num(headline[k])) is not None)]  # fmt: skip
    body = "".join(cards) or "<p class='meta'>(no headline numbers)</p>"
    return f"<h2>Headline</h2>\n<div class='headline'>{body}{verdict_list(verdicts)}</div>\n"


def episodic_cards(analysis: dict[str, Any]) -> list[str]:
    """An episodic run's answer first: the success rate with its Wilson interval, then the speed-up against
    serial (its median and spread when repeated), from the run's analysis."""
    overall = ((analysis.get("success") or {}).get("overall")) or {}
    cards: list[str] = []
    rate = _num(overall.get("success_rate"))
    if rate is not None:
        lo, hi = _num(overall.get("ci95_low")), _num(overall.get("ci95_high"))
        note = (f"95 % {lo:.2f}–{hi:.2f}, " if lo is not None and hi is not None else "") + \
            f"{overall.get('successes')}/{overall.get('episodes')} episodes"
        cards.append(_card("success rate", f"{rate:.1%}", note))
    speed = analysis.get("speedup_vs_serial")
    if isinstance(speed, dict) and (speed.get("measurement_error") or speed.get("valid") is False):
        error = str(speed.get("measurement_error") or speed.get("error") or "")
        cards.append(_card("speed-up vs serial", "not reported", f"measurement error: {error}"[:90]))
    elif isinstance(speed, dict):
        med, lo, hi = (_num(speed.get(k)) for k in ("median", "min", "max"))
        if med is not None:
            spread = f"min–max {lo:.2f}–{hi:.2f}x" if lo is not None and hi is not None else ""
            cards.append(_card("speed-up vs serial", f"{med:.2f}x", spread))
    elif (value := _num(speed)) is not None:
        cards.append(_card("speed-up vs serial", f"{value:.2f}x", "one batched and one serial run"))
    return cards


def eval_headline_section(results: Sequence[dict[str, Any]], verdicts: Sequence[Verdict], limit: int = 12) -> str:
    """One card per task and metric: the score with its 95 % interval (value +- 1.96 stderr) and sample count."""
    cards: list[str] = []
    for r in results:
        for name, mv in (r.get("metrics") or {}).items():
            v = _num((mv or {}).get("value"))
            if v is None or len(cards) >= limit:
                continue
            iv = _interval(mv, name)
            note = (f"95 % {iv[0]:.3g}–{iv[1]:.3g}, " if iv else "") + f"n = {mv.get('n') or r.get('n_samples')}"
            cards.append(_card(f"{r.get('task')} · {name}", _fmt(v), note))
    body = "".join(cards) or "<p class='meta'>(no scores)</p>"
    return f"<h2>Headline</h2>\n<div class='headline'>{body}{verdict_list(verdicts)}</div>\n"


def _outcome_verdicts(run: dict[str, Any]) -> list[Verdict]:
    out = run.get("outcome") or run.get("stats") or {}
    verdicts: list[Verdict] = []
    if out.get("interrupted"):
        verdicts.append(("the run was interrupted: the numbers cover what was measured before", False))
    failed = out.get("failed")
    if isinstance(failed, int) and failed > 0:
        kinds = out.get("failures_by_kind") or {}
        verdicts.append((f"{failed} failed" + (f" ({', '.join(f'{k}: {n}' for k, n in kinds.items())})"
                                               if kinds else ""), False))  # fmt: skip
    elif isinstance(failed, int):
        verdicts.append((f"{out.get('ok')} measured, none failed", True))
    return verdicts


def perf_verdicts(run: dict[str, Any], report: dict[str, Any], summary: list[dict[str, str]]) -> list[Verdict]:
    """SLO attainment per point against its goal, the search verdict, failures."""
    verdicts = _outcome_verdicts(run)
    cfg = run.get("config") or {}
    goal = _num(cfg.get("slo_attainment"))
    if cfg.get("slo") and goal is not None:
        for row in summary:
            att = _num(row.get("slo_attainment"))
            if att is not None:
                verdicts.append((f"point {row.get('point')}: SLO {cfg['slo']} met by {att:.1%} of requests "
                                 f"(goal {goal:.0%})", att >= goal))  # fmt: skip
    search = report.get("search")
    if isinstance(search, dict) and search.get("verdict"):
        verdicts.append((str(search["verdict"]), search.get("best") is not None))
    return verdicts


def spec_verdicts(run: dict[str, Any], analysis: dict[str, Any]) -> list[Verdict]:
    """The spec's own goal (unattributed share of TTFT), failures."""
    verdicts = _outcome_verdicts(run)
    una = analysis.get("unattributed")
    if isinstance(una, dict):
        worst, goal = _num(una.get("max_pct_per_sample")), _num(una.get("goal_pct"))
        if worst is not None and goal is not None:
            verdicts.append((f"unattributed time: worst sample {worst:.2f} % of TTFT (goal <= {goal:g} %)",
                             worst <= goal))  # fmt: skip
    return verdicts


def eval_verdicts(run: dict[str, Any]) -> list[Verdict]:
    """Failures of an eval run."""
    return _outcome_verdicts(run)


def _records_by_point(run_dir: Path) -> dict[str, list[float]]:
    ttft: dict[str, list[float]] = {}
    path = run_dir / "records.jsonl"
    if not path.is_file():
        return ttft
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            v = _num(rec.get("ttft_ms"))
            if v is None or rec.get("warmup") or not rec.get("ok"):
                continue
            lab = rec.get("labels") or {}
            name = f"rate {lab['rate']}" if lab.get("rate") is not None else f"conc {lab.get('concurrency')}"
            ttft.setdefault(f"#{lab.get('point')} {name}", []).append(v)
    return ttft


def perf_charts(run_dir: Path, summary: list[dict[str, str]]) -> str:
    """TTFT CDF per point, latency percentiles per point, and the load curve when there are several points."""
    charts = []
    ttft = _records_by_point(run_dir)
    if ttft:
        cdf = {}
        for name, vals in ttft.items():
            s = sorted(vals)
            step = max(1, len(s) // 200)
            cdf[name] = [(v, (i + 1) / len(s)) for i, v in enumerate(s) if i % step == 0 or i == len(s) - 1]
        charts.append(line_chart("TTFT distribution (CDF)", cdf, x_label="TTFT (ms)", y_label="fraction",
                                 markers=False))  # fmt: skip
    if summary:
        cats = [f"#{r.get('point')}" for r in summary]
        series = {f"{m} {s}": [_num(r.get(f"{m}_{s}")) for r in summary]
                  for m in ("ttft_ms", "tpot_ms", "e2e_ms") for s in ("p50", "p99")}  # fmt: skip
        series = {k: v for k, v in series.items() if any(x is not None for x in v)}
        charts.append(bar_chart("Latency per point (ms)", cats, series, y_label="ms"))
    loads = [(_num(r.get("rate")) or _num(r.get("concurrency")), r) for r in summary]
    if len(summary) > 1 and all(x is not None for x, _ in loads):
        tput = [(float(x or 0), _num(r.get("output_token_throughput")) or math.nan) for x, r in loads]
        curve = {"output tok/s": tput}
        charts.append(line_chart("Throughput against load", curve, x_label="rate or concurrency",
                                 y_label="output tokens/s"))  # fmt: skip
        lat = {"TTFT p50": [(float(x or 0), _num(r.get("ttft_ms_p50")) or math.nan) for x, r in loads],
               "TTFT p99": [(float(x or 0), _num(r.get("ttft_ms_p99")) or math.nan) for x, r in loads]}
        charts.append(line_chart("TTFT against load", lat, x_label="rate or concurrency", y_label="ms"))
    if any(_num(r.get("accuracy")) is not None for r in summary) and all(x is not None for x, _ in loads):
        acc = {f"accuracy{suffix} (%)": [(float(x or 0), 100 * (_num(r.get(f"accuracy{col}")) or math.nan))
                                         for x, r in loads]
               for suffix, col in (("", ""), (" 95% CI low", "_ci_low"), (" 95% CI high", "_ci_high"))}  # fmt: skip
        charts.append(line_chart("Accuracy against load (perf --tasks --score)", acc, x_label="rate or concurrency",
                                 y_label="% correct"))  # fmt: skip
    return _charts_block(charts)


def spec_charts(summary: list[dict[str, str]], stage_fields: Sequence[str] = ()) -> str:
    """Stage medians per sample, and p50 / p90 of every timed field over all samples."""
    charts = []
    all_rows = [r for r in summary if r.get("level") == "all" and str(r.get("field", "")).endswith("_ms")]
    if all_rows:
        cats = [str(r["field"]).removesuffix("_ms") for r in all_rows][:14]
        charts.append(bar_chart("All samples (ms)", cats, {
            "p50": [_num(r.get("p50")) for r in all_rows][:14], "p90": [_num(r.get("p90")) for r in all_rows][:14]},
            y_label="ms"))  # fmt: skip
    fields = [f for f in stage_fields if f.endswith("_ms")] or [str(r["field"]) for r in all_rows]
    fields = fields[:6]
    samples = list(dict.fromkeys(str(r["key"]) for r in summary if r.get("level") == "sample"))[:16]
    if samples and fields:
        med = {(str(r["key"]), str(r["field"])): _num(r.get("p50")) for r in summary if r.get("level") == "sample"}
        series = {f.removesuffix("_ms"): [med.get((s, f)) for s in samples] for f in fields}
        charts.append(bar_chart("Median per sample (ms)", samples, series, y_label="ms"))
    return _charts_block(charts)


def _bounded(results: list[dict[str, Any]], metric: str) -> bool:
    """Whether ``metric`` is a 0..1 score (accuracy-like) in every task that has it."""
    found = [_num(((r.get("metrics") or {}).get(metric) or {}).get("value")) for r in results]
    vals = [v for v in found if v is not None]
    return bool(vals) and all(0.0 <= v <= 1.0 for v in vals)


def eval_charts(results: list[dict[str, Any]]) -> str:
    """0..1 scores (accuracies) per task with 95 % intervals (value +- 1.96 stderr), then per group;
    unbounded metrics (perplexities) get a chart of their own per task."""
    charts = []
    names = list(dict.fromkeys(m for r in results for m in (r.get("metrics") or {})))
    scores = [m for m in names if _bounded(results, m)]
    scored = [r for r in results if any(m in (r.get("metrics") or {}) for m in scores)]
    if scored:
        cats = [str(r.get("task")) for r in scored]
        series: dict[str, list[float | None]] = {}
        intervals: dict[str, list[tuple[float, float] | None]] = {}
        for m in scores:
            mvs = [(r.get("metrics") or {}).get(m) or {} for r in scored]
            series[m] = [_num(mv.get("value")) for mv in mvs]
            intervals[m] = [_interval(mv, m) for mv in mvs]
        charts.append(bar_chart("Score per task (95 % interval)", cats, series, intervals=intervals, y_max=1.0))
    for r in results:
        own = [m for m in (r.get("metrics") or {}) if m not in scores]
        if own:
            mvs = [r["metrics"][m] for m in own]
            charts.append(bar_chart(f"{r.get('task')} (95 % interval)", own, {"value": [_num(mv.get("value"))
                                    for mv in mvs]}, intervals={"value": [_interval(mv) for mv in mvs]}))  # fmt: skip
        for col, groups in (r.get("groups") or {}).items():
            cats = list(groups)[:20]
            metric = next((m for m in (r.get("metrics") or {}) if m in scores), None)
            if not cats or metric is None:
                continue
            vals = [_num((groups[g].get(metric) or {}).get("value")) for g in cats]
            ivs = [_interval(groups[g].get(metric) or {}, metric) for g in cats]
            charts.append(bar_chart(f"{r.get('task')}: {metric} by {col}", cats, {metric: vals},
                                    intervals={metric: ivs}, y_max=1.0))  # fmt: skip
    return _charts_block(charts)


_SHARES = ("acc", "exact_match", "em", "f1", "anls", "accuracy", "match", "pass", "bleu", "rouge")  # mcc spans -1..1


def _interval(mv: dict[str, Any], name: str = "") -> tuple[float, float] | None:
    """value +- 1.96 stderr, cut to what the metric can take: a score of 0 to 1 (accuracy, F1, ...) never shows a
    bound below 0 or above 1 (with few samples the normal interval reaches past them)."""
    v, se = _num(mv.get("value")), _num(mv.get("stderr"))
    if v is None or se is None:
        return None
    lo, hi = v - 1.96 * se, v + 1.96 * se
    if name.lower().startswith(_SHARES) and 0.0 <= v <= 1.0:
        lo, hi = max(lo, 0.0), min(hi, 1.0)
    return lo, hi


def charts_block(charts: list[str]) -> str:
    """The Charts section of a page (a placeholder when nothing was measured to chart)."""
    return _charts_block(charts)


def _charts_block(charts: list[str]) -> str:
    charts = [c for c in charts if c]
    if not charts:
        return "<h2>Charts</h2><p class='meta'>(nothing measured to chart)</p>\n"
    return ("<h2>Charts</h2><p class='meta'>hover a mark for its value; click a legend entry to hide it</p>"
            f"<div class='charts'>{''.join(charts)}</div>\n")  # fmt: skip
