"""Self-contained, interactive charts for the HTML reports: inline SVG plus a few lines of inline JS.

No network, no library: each chart is an ``<svg class='chart'>`` string whose marks carry a
``<title>`` (the browser's tooltip) and ``data-series``; the script in ``CHART_SCRIPT`` shows a
tooltip on hover and hides or shows a series when its legend entry is clicked. Values that were not
measured (None, NaN) are left out of the chart, never drawn as zero.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

__all__ = ["CHART_CSS", "CHART_SCRIPT", "bar_chart", "forest_chart", "line_chart"]

PALETTE = ("#2f6fdb", "#e07b1a", "#2e9e5b", "#c03b3b", "#7a52c7", "#8c6d31", "#d44f9e", "#4a4a4a")
_W, _H = 640, 300
_L, _R, _T, _B = 64, 16, 50, 56  # the legend sits between the title and the plot

CHART_CSS = """
svg.chart{background:#fff;border:1px solid #d8dde5;border-radius:6px;margin:6px 8px 6px 0;max-width:100%;height:auto}
svg.chart text{font:11px system-ui,sans-serif;fill:#1d2430}svg.chart .axis{stroke:#9aa3b2;stroke-width:1}
svg.chart .grid{stroke:#eef1f5}svg.chart .legend{cursor:pointer}svg.chart .off{opacity:.15}
svg.chart .mark:hover{stroke:#000;stroke-width:1.5}#chart-tip{position:fixed;pointer-events:none;background:#1d2430;
color:#fff;padding:3px 7px;border-radius:4px;font:12px system-ui;display:none;z-index:9}
.charts{display:flex;flex-wrap:wrap}
"""

CHART_SCRIPT = """
(function(){var tip=document.createElement('div');tip.id='chart-tip';document.body.appendChild(tip);
document.querySelectorAll('svg.chart .mark').forEach(function(m){var t=m.querySelector('title');if(!t)return;
m.addEventListener('mousemove',function(e){tip.textContent=t.textContent;tip.style.display='block';
tip.style.left=(e.clientX+12)+'px';tip.style.top=(e.clientY+12)+'px';});
m.addEventListener('mouseleave',function(){tip.style.display='none';});});
document.querySelectorAll('svg.chart .legend').forEach(function(l){l.addEventListener('click',function(){
var s=l.getAttribute('data-series'),svg=l.closest('svg');l.classList.toggle('off');
svg.querySelectorAll('[data-series="'+s+'"]').forEach(function(m){if(m!==l)m.classList.toggle('off');});});});
})();
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    mag = 10.0 ** math.floor(math.log10(v))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if v <= step * mag:
            return step * mag
    return 10 * mag


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _frame(title: str, y_lo: float, y_hi: float, y_label: str, x_label: str) -> list[str]:
    parts = [f"<text x='{_L}' y='16' font-weight='600'>{_e(title)}</text>"]
    for i in range(5):
        v = y_lo + (y_hi - y_lo) * i / 4
        y = _T + (_H - _T - _B) * (1 - i / 4)
        parts.append(f"<line class='grid' x1='{_L}' x2='{_W - _R}' y1='{y:.1f}' y2='{y:.1f}'/>"
                     f"<text x='{_L - 6}' y='{y + 4:.1f}' text-anchor='end'>{_fmt(v)}</text>")  # fmt: skip
    parts.append(f"<line class='axis' x1='{_L}' x2='{_L}' y1='{_T}' y2='{_H - _B}'/>"
                 f"<line class='axis' x1='{_L}' x2='{_W - _R}' y1='{_H - _B}' y2='{_H - _B}'/>")  # fmt: skip
    parts.append(f"<text transform='translate(14,{(_T + _H - _B) / 2:.0f}) rotate(-90)' text-anchor='middle'>"
                 f"{_e(y_label)}</text><text x='{(_L + _W - _R) / 2:.0f}' y='{_H - 8}' text-anchor='middle'>"
                 f"{_e(x_label)}</text>")  # fmt: skip
    return parts


def _legend(names: Sequence[str]) -> str:
    out, x, y = [], _L, 22
    for i, name in enumerate(names):
        color = PALETTE[i % len(PALETTE)]
        width = 24 + 7 * len(name)
        if x + width > _W and x > _L:  # a second row
            x, y = _L, y + 13
        out.append(f"<g class='legend' data-series='{i}'><rect x='{x}' y='{y}' width='10' height='10' "
                   f"fill='{color}'/><text x='{x + 14}' y='{y + 9}'>{_e(name)}</text></g>")  # fmt: skip
        x += width
    return "".join(out)


def _svg(body: list[str], label: str) -> str:
    return (f"<svg class='chart' role='img' aria-label='{_e(label)}' viewBox='0 0 {_W} {_H}' width='{_W}' "
            f"height='{_H}' xmlns='http://www.w3.org/2000/svg'>{''.join(body)}</svg>")  # fmt: skip


def bar_chart(title: str, categories: Sequence[str], series: Mapping[str, Sequence[float | None]], *,
              y_label: str = "", intervals: Mapping[str, Sequence[tuple[float, float] | None]] | None = None,
              y_max: float | None = None) -> str:
    """Grouped bars: one group per category, one bar per series; optional interval whiskers (clipped
    to the axis, whose top is ``y_max`` when given)."""
    values = [v for vs in series.values() for v in vs if v is not None and _finite(v)]
    highs = [hi for ivs in (intervals or {}).values() for iv in ivs if iv for hi in iv[1:] if _finite(hi)]
    y_hi = y_max or _nice_max(max([*values, *highs], default=1.0))
    parts = _frame(title, 0.0, y_hi, y_label, "")
    n_cat, n_ser = max(len(categories), 1), max(len(series), 1)
    slot = (_W - _L - _R) / n_cat
    bar_w = max(2.0, slot * 0.8 / n_ser)
    plot_h = _H - _T - _B

    def y_of(v: float) -> float:
        return _T + plot_h * (1 - min(max(v, 0.0), y_hi) / y_hi)

    for ci, cat in enumerate(categories):
        cx = _L + slot * ci + slot * 0.1
        tx = _L + slot * (ci + 0.5)
        if n_cat > 5:  # slanted, so long names do not overlap
            parts.append(f"<text x='{tx:.1f}' y='{_H - _B + 12}' text-anchor='end' "
                         f"transform='rotate(-30 {tx:.1f} {_H - _B + 12})'>{_e(cat[:18])}</text>")  # fmt: skip
        else:
            parts.append(f"<text x='{tx:.1f}' y='{_H - _B + 14}' text-anchor='middle'>{_e(cat[:24])}</text>")
        for si, (name, vals) in enumerate(series.items()):
            v = vals[ci] if ci < len(vals) else None
            if v is None or not _finite(v):
                continue
            x, y = cx + bar_w * si, y_of(v)
            d = f"M{x:.1f},{_H - _B}V{y:.1f}H{x + bar_w - 1:.1f}V{_H - _B}Z"
            parts.append(f"<path class='mark' data-series='{si}' d='{d}' fill='{PALETTE[si % len(PALETTE)]}'>"
                         f"<title>{_e(cat)} · {_e(name)}: {_fmt(v)}</title></path>")  # fmt: skip
            iv = (intervals or {}).get(name, [None] * len(categories))[ci] if intervals else None
            if iv and _finite(iv[0]) and _finite(iv[1]):
                mx = x + bar_w / 2
                parts.append(f"<path data-series='{si}' d='M{mx:.1f},{y_of(iv[0]):.1f}V{y_of(iv[1]):.1f}' "
                             "stroke='#1d2430' stroke-width='1.5'/>")  # fmt: skip
    parts.append(_legend(list(series)))
    return _svg(parts, title)


def line_chart(title: str, series: Mapping[str, Sequence[tuple[float, float]]], *, x_label: str = "",
               y_label: str = "", markers: bool = True) -> str:
    """Lines through (x, y) points, one per series (a CDF, a load curve)."""
    pts = [(x, y) for s in series.values() for x, y in s if _finite(x) and _finite(y)]
    if not pts:
        return ""
    x_lo, x_hi = min(p[0] for p in pts), max(p[0] for p in pts)
    x_lo = min(x_lo, 0.0) if x_lo >= 0 and x_lo < x_hi * 0.2 else x_lo
    x_hi = x_hi if x_hi > x_lo else x_lo + 1
    y_hi = _nice_max(max(p[1] for p in pts))
    parts = _frame(title, 0.0, y_hi, y_label, x_label)
    for i in range(5):
        v = x_lo + (x_hi - x_lo) * i / 4
        parts.append(f"<text x='{_L + (_W - _L - _R) * i / 4:.1f}' y='{_H - _B + 14}' text-anchor='middle'>"
                     f"{_fmt(v)}</text>")  # fmt: skip

    def xy(x: float, y: float) -> tuple[float, float]:
        return (_L + (_W - _L - _R) * (x - x_lo) / (x_hi - x_lo), _T + (_H - _T - _B) * (1 - min(y, y_hi) / y_hi))

    for si, (name, s) in enumerate(series.items()):
        good = [(x, y) for x, y in s if _finite(x) and _finite(y)]
        if not good:
            continue
        color = PALETTE[si % len(PALETTE)]
        d = "M" + "L".join(f"{a:.1f},{b:.1f}" for a, b in (xy(x, y) for x, y in good))
        parts.append(f"<path class='mark' data-series='{si}' d='{d}' fill='none' stroke='{color}' stroke-width='2'>"
                     f"<title>{_e(name)}</title></path>")  # fmt: skip
        if markers and len(good) <= 40:
            for x, y in good:
                a, b = xy(x, y)
                parts.append(f"<circle class='mark' data-series='{si}' cx='{a:.1f}' cy='{b:.1f}' r='3.5' "
                             f"fill='{color}'><title>{_e(name)}: {_fmt(x)}, {_fmt(y)}</title></circle>")  # fmt: skip
    parts.append(_legend(list(series)))
    return _svg(parts, title)


def forest_chart(title: str, rows: Sequence[tuple[str, float, float | None, float | None, str]], *,
                 unit: str = "%") -> str:
    """Changes with their intervals, one row each: (label, change, low, high, verdict)."""
    top = 28
    changes = [abs(c) for _, c, _, _, _ in rows if _finite(c)]
    span = _nice_max(1.5 * max(changes, default=1.0))  # intervals wider than this are clipped at the edge
    height = top + 22 * max(len(rows), 1) + 30
    mid_l, mid_r = 300, _W - _R

    def x_of(v: float) -> float:
        return mid_l + (mid_r - mid_l) * (max(-span, min(span, v)) + span) / (2 * span)

    parts = [f"<text x='8' y='16' font-weight='600'>{_e(title)}</text>",
             f"<line class='axis' x1='{x_of(0):.1f}' x2='{x_of(0):.1f}' y1='{top - 4}' y2='{height - 24}'/>",
             f"<text x='{mid_l}' y='{height - 8}'>-{_fmt(span)} {unit}</text>",
             f"<text x='{mid_r}' y='{height - 8}' text-anchor='end'>+{_fmt(span)} {unit}</text>"]  # fmt: skip
    colors = {"regression": "#c03b3b", "improvement": "#2e9e5b"}
    for i, (label, change, lo, hi, verdict) in enumerate(rows):
        y = top + 22 * i + 8
        color = colors.get(verdict, "#5b6678")
        parts.append(f"<text x='8' y='{y + 4}'>{_e(label[:44])}</text>")
        if lo is not None and hi is not None and _finite(lo) and _finite(hi):
            parts.append(f"<path d='M{x_of(lo):.1f},{y}H{x_of(hi):.1f}' stroke='{color}' stroke-width='2'/>")
        if _finite(change):
            tip = f"{label}: {change:+.1f} {unit}" + ("" if lo is None else f" [{lo:+.1f}, {hi:+.1f}]") + f" {verdict}"
            parts.append(f"<path class='mark' d='M{x_of(change) - 5:.1f},{y}l5,-5l5,5l-5,5z' fill='{color}'>"
                         f"<title>{_e(tip)}</title></path>")  # fmt: skip
    return (f"<svg class='chart' role='img' aria-label='{_e(title)}' viewBox='0 0 {_W} {height}' width='{_W}' "
            f"height='{height}' xmlns='http://www.w3.org/2000/svg'>{''.join(parts)}</svg>")  # fmt: skip
