"""Headline metrics of a run, from what it wrote: the few numbers the run store indexes and lists.

Pure functions of rows and dicts (standard library only). A value that was not measured is left
out, never filled with a default.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lmmbench.core.numbers import to_float

__all__ = ["PERF_HEADLINE", "eval_headline", "perf_headline", "spec_headline"]

#: summary.csv columns a perf run is listed by.
PERF_HEADLINE = ("qps", "output_token_throughput", "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_mean",
                 "itl_ms_mean", "e2e_ms_p50", "e2e_ms_p99", "errors", "accuracy")  # fmt: skip


def perf_headline(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Headline of a perf run from its summary rows; keys get ``[point N]`` when there are several."""
    out: dict[str, float | None] = {}
    for row in rows:
        suffix = f" [point {row.get('point')}]" if len(rows) > 1 else ""
        for key in PERF_HEADLINE:
            value = to_float(row.get(key))
            if value is not None:
                out[key + suffix] = value
    return out


def spec_headline(rows: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """Median over the measured rows of a spec's results of every ``*_ms`` column (old TTFT breakdown
    rows in today's names)."""
    from lmmbench.core.ttft_names import upgrade_breakdown_row

    values: dict[str, list[float]] = {}
    for row in map(upgrade_breakdown_row, rows):
        if row.get("status", "ok") not in ("ok", "", None):
            continue
        for key, cell in row.items():
            if key.endswith("_ms"):
                x = to_float(cell)
                if x is not None:
                    values.setdefault(key, []).append(x)
    return {f"{k}_median": statistics.median(v) for k, v in values.items() if v}


def eval_headline(results: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """``<task>.<metric>`` -> value, from the aggregate results of each task."""
    out: dict[str, float | None] = {}
    for res in results:
        for name, mv in (res.get("metrics") or {}).items():
            value = to_float(mv.get("value") if isinstance(mv, Mapping) else mv)
            if value is not None:
                out[f"{res.get('task')}.{name}"] = value
    return out
