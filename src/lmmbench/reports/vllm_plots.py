"""``vllm bench serve``'s two figures, written beside its result file: ``--plot-timeline`` (``<file>.timeline.html``,
one row per request: the wait for the first token, then each inter-token gap coloured against
``--timeline-itl-thresholds`` ms: below the first green, between orange, above red) and ``--plot-dataset-stats``
(``<file>.dataset_stats.png``: histograms of prompt, output and total tokens). vLLM draws them with plotly and
matplotlib; the timeline here is a self-contained SVG page, the statistics need matplotlib (``lmmbench[plots]``).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["write_dataset_stats", "write_timeline"]

_ROW, _WIDTH = 6, 1200


def _colour(gap_s: float, thresholds_s: Sequence[float]) -> str:
    return "#2ca02c" if gap_s < thresholds_s[0] else "#ff7f0e" if gap_s < thresholds_s[1] else "#d62728"


def write_timeline(result: dict[str, Any], path: Path, thresholds_ms: Sequence[float]) -> Path:
    """The per-request timeline page of a detailed result (``start_times``, ``ttfts``, ``itls``)."""
    starts, ttfts, itls = result.get("start_times") or [], result.get("ttfts") or [], result.get("itls") or []
    if not starts:
        raise UserError("--plot-timeline: no request was measured, so there is no timeline to draw")
    t0 = min(starts)
    end = max(s - t0 + t + sum(i) for s, t, i in zip(starts, ttfts, itls, strict=False)) or 1.0
    scale = _WIDTH / end
    limits = [t / 1e3 for t in thresholds_ms]
    parts = []
    for row, (s, ttft, gaps) in enumerate(zip(starts, ttfts, itls, strict=False)):
        x, y = (s - t0) * scale, row * _ROW
        parts.append(f'<rect x="{x:.2f}" y="{y}" width="{max(ttft * scale, 0.5):.2f}" height="{_ROW - 1}" '
                     f'fill="#1f77b4"><title>request {row}: TTFT {ttft * 1e3:.2f} ms</title></rect>')  # fmt: skip
        x += ttft * scale
        for g in gaps:
            parts.append(f'<rect x="{x:.2f}" y="{y}" width="{max(g * scale, 0.3):.2f}" height="{_ROW - 1}" '
                         f'fill="{_colour(g, limits)}"/>')  # fmt: skip
            x += g * scale
    legend = html.escape(f"blue: time to first token; ITL green < {thresholds_ms[0]:g} ms <= orange < "
                         f"{thresholds_ms[1]:g} ms <= red; {end:.3f} s across")  # fmt: skip
    page = (f"<!doctype html><meta charset='utf-8'><title>{html.escape(path.stem)}</title><p>{legend}</p>"
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{len(starts) * _ROW}">'
            + "".join(parts) + "</svg>\n")  # fmt: skip
    path.write_text(page, encoding="utf-8")
    return path


def write_dataset_stats(result: dict[str, Any], path: Path) -> Path:
    """Histograms of the prompt, output and total token counts of a detailed result."""
    ins, outs = result.get("input_lens") or [], result.get("output_lens") or []
    if not ins:
        raise UserError("--plot-dataset-stats: no request was measured")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("--plot-dataset-stats needs matplotlib: pip install 'lmmbench[plots]'") from None
    totals = [a + b for a, b in zip(ins, outs, strict=False) if a is not None and b is not None]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, values, name in zip(axes, (ins, outs, totals), ("prompt tokens", "output tokens",
                                                               "prompt + output tokens"), strict=True):  # fmt: skip
        known = [v for v in values if v is not None]  # an unknown length is left out, never drawn as 0
        ax.hist(known, bins=min(50, max(len(set(known)), 1)))
        ax.set_title(f"{name} (n={len(known)})")
        ax.set_xlabel("tokens")
        ax.set_ylabel("requests")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
