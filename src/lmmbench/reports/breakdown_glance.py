"""The top of a TTFT-breakdown report: the answer to "where does the time go", before any table.

The headline is TTFT (median over every measured row, with its distribution-free 95 % interval) and the
share of TTFT of each of the TTFT study's stages (visual, audio, prefill, others) in words; the first chart
is one stacked bar per input (median over its repeats, in milliseconds): preprocessing (before ``generate``,
so beside TTFT rather than inside it), visual encoder, audio encoder, prefill and others each split, and
what no timer covers. Raw field names appear
only in the tables further down. Built from ``<spec>_results.csv`` rows alone.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from lmmbench.core.numbers import to_float as _num
from lmmbench.metrics.noise import median_ci

__all__ = ["BREAKDOWN_SEGMENTS", "STUDY_SEGMENTS", "breakdown_headline", "is_breakdown", "stage_stack_chart",
           "stage_summary_chart"]

_READABLE = (("preprocess", "preprocess_ms"), ("visual encoder", "visual_encoder_ms"),
             ("audio encoder", "audio_encoder_ms"), ("prefill", "prefill_ms"), ("others", "others_ms"),
             ("TTFT", "ttft_ms"))  # fmt: skip

#: (label, the result fields it adds up), in the order a stacked bar shows them: the TTFT study's stages
#: (visual, audio, prefill, others), prefill and others each split in two or three.
BREAKDOWN_SEGMENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("preprocess", ("preprocess_ms",)),
    ("visual encoder", ("visual_encoder_ms",)),
    ("audio encoder", ("audio_encoder_ms",)),
    ("prefill: LLM forward", ("llm_prefill_ms",)),
    ("prefill: merge, rope index, lm head", ("prefill_merge_ms", "prefill_rope_index_ms", "prefill_lm_head_ms",
                                             "prefill_forward_glue_ms")),
    ("others: setup and inputs", ("others_input_transfer_ms", "others_generate_setup_ms", "others_input_prep_ms",
                                  "others_encoder_dispatch_ms", "others_cache_setup_ms")),
    ("others: first token", ("others_first_token_ms",)),
    ("unattributed", ("others_unattributed_ms",)),
)  # fmt: skip
#: the TTFT study's stages, for the headline's words
STUDY_SEGMENTS = (("visual encoder", "visual_encoder_ms"), ("audio encoder", "audio_encoder_ms"),
                  ("prefill", "prefill_ms"), ("others", "others_ms"))  # fmt: skip
_COLORS = ("#8c96a8", "#2f6fdb", "#e07b1a", "#2e9e5b", "#7a52c7", "#d44f9e", "#8c6d31", "#17a2b8", "#c03b3b")
_W, _LABEL_W, _BAR_H = 720, 170, 20


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _ok(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r.get("status", "ok") in ("ok", "", None)]


def is_breakdown(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether these results carry a TTFT breakdown (TTFT and at least one encoder or prefill stage)."""
    return any(_num(r.get("ttft_ms")) is not None and _num(r.get("prefill_ms")) is not None for r in _ok(rows))


def _segment(row: Mapping[str, Any], fields: tuple[str, ...]) -> float | None:
    vals = [_num(row.get(f)) for f in fields]
    got = [v for v in vals if v is not None]
    return sum(got) if got else None


def _per_input(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[float | None]]:
    """Input -> per segment, the median over that input's repeats (None: not measured)."""
    by_input: dict[str, list[Mapping[str, Any]]] = {}
    for r in _ok(rows):
        by_input.setdefault(str(r.get("sample_id", "")), []).append(r)
    out: dict[str, list[float | None]] = {}
    for name, rs in by_input.items():
        meds: list[float | None] = []
        for _, fields in BREAKDOWN_SEGMENTS:
            vals = [v for v in (_segment(r, fields) for r in rs) if v is not None]
            meds.append(statistics.median(vals) if vals else None)
        out[name] = meds
    return out


def breakdown_headline(rows: Sequence[Mapping[str, Any]]) -> str:
    """TTFT's median with its interval, then each named stage's share of TTFT, in words."""
    ok = _ok(rows)
    ttft = [v for v in (_num(r.get("ttft_ms")) for r in ok) if v is not None]
    if not ttft:
        return ""
    med = statistics.median(ttft)
    ci = median_ci(ttft)
    ci_text = f"95 % interval {ci[0]:.4g}–{ci[1]:.4g} ms" if ci else "no interval (fewer than 6 rows)"
    total = sum(ttft)

    def share(fields: tuple[str, ...]) -> float | None:
        vals = [(_segment(r, fields), _num(r.get("ttft_ms"))) for r in ok]
        part = sum(v for v, t in vals if v is not None and t is not None)
        return part / total * 100 if any(v is not None for v, _ in vals) and total > 0 else None

    shares = {label: share((field,)) for label, field in STUDY_SEGMENTS}
    words = ", ".join(f"{label} {pct:.0f} %" for label, pct in shares.items() if pct is not None)
    llm, unattributed = share(("llm_prefill_ms",)), share(("others_unattributed_ms",))
    if llm is not None and shares["prefill"] is not None:
        words += f" (of prefill, the LLM forward {llm:.0f} % of TTFT)"
    if unattributed is not None:
        words += f"; unattributed {unattributed:.1f} %"
    pre = [v for v in (_num(r.get("preprocess_ms")) for r in ok) if v is not None]
    pre_text = (f" Preprocessing before <code>generate</code> adds a median of {statistics.median(pre):.4g} ms."
                if pre else "")
    return (f"<h2>Headline</h2><div class='headline'><p style='font-size:18px'><b>TTFT {med:.4g} ms</b> "
            f"<span class='meta'>median of {len(ttft)} measured rows, {ci_text}</span></p>"
            f"<p>Where TTFT goes: {_e(words) or '(no stage measured)'} (the TTFT study's stages).{pre_text}</p>"
            "</div>\n")


def _legend() -> tuple[str, int]:
    """The legend, wrapped into rows; and the y where the bars start below it."""
    out, x, y = [], 8.0, 26
    for i, (label, _) in enumerate(BREAKDOWN_SEGMENTS):
        width = 20 + 6.5 * len(label)
        if x + width > _W:
            x, y = 8.0, y + 15
        out.append(f"<g class='legend' data-series='{i}'><rect x='{x:.0f}' y='{y}' width='10' height='10' "
                   f"fill='{_COLORS[i]}'/><text x='{x + 13:.0f}' y='{y + 9}'>{_e(label)}</text></g>")
        x += width
    return "".join(out), y + 24


def stage_stack_chart(rows: Sequence[Mapping[str, Any]], limit: int = 24) -> str:
    """One horizontal stacked bar per input (median over repeats, ms); labels left, never overlapping."""
    data = list(_per_input(rows).items())[:limit]
    if not data:
        return ""
    longest = max(sum(v for v in meds if v is not None) for _, meds in data) or 1.0
    legend, top = _legend()
    height = top + len(data) * (_BAR_H + 6) + 12
    scale = (_W - _LABEL_W - 56) / longest  # room for the total after the longest bar
    parts = ["<text x='8' y='16' font-weight='600'>Where the time goes, per input (median ms)</text>", legend]
    for row, (name, meds) in enumerate(data):
        y = top + row * (_BAR_H + 6)
        short = name if len(name) <= 24 else name[:23] + "…"
        parts.append(f"<text x='{_LABEL_W - 6}' y='{y + 14}' text-anchor='end'><title>{_e(name)}</title>"
                     f"{_e(short)}</text>")
        left = float(_LABEL_W)
        for i, v in enumerate(meds):
            if v is None or v <= 0:
                continue
            w = v * scale
            parts.append(f"<path class='mark' data-series='{i}' d='M{left:.1f},{y}h{w:.1f}v{_BAR_H}h{-w:.1f}z' "
                         f"fill='{_COLORS[i]}'><title>{_e(name)} · "
                         f"{_e(BREAKDOWN_SEGMENTS[i][0])}: {v:.4g} ms</title></path>")
            left += w
        total = sum(v for v in meds if v is not None)
        parts.append(f"<text x='{left + 4:.1f}' y='{y + 14}'>{total:.4g}</text>")
    return (f"<svg class='chart' role='img' aria-label='stage breakdown per input' viewBox='0 0 {_W} {height}' "
            f"width='{_W}' height='{height}' xmlns='http://www.w3.org/2000/svg'>{''.join(parts)}</svg>")


def stage_summary_chart(summary: Sequence[Mapping[str, Any]]) -> str:
    """Median and p90 over every input of each top-level stage, named in words."""
    from lmmbench.reports.svg_charts import bar_chart

    stats = {str(r.get("field")): r for r in summary if r.get("level") == "all"}
    names = [(label, field) for label, field in _READABLE if field in stats]
    if not names:
        return ""
    series = {s: [_num(stats[f].get(s)) for _, f in names] for s in ("p50", "p90")}
    return bar_chart("Each stage over all inputs (ms)", [label for label, _ in names],
                     {"median": series["p50"], "p90": series["p90"]}, y_label="ms")
