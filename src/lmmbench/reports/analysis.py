"""The analysis file: linear fits of stages against token counts, stage shares, unattributed share.

Fits use one point per sample (its median over repeats by default, or its minimum: contention on
a shared CPU only ever adds time, so the least-disturbed repeat is the cleanest estimate) over
the samples where the x quantity is present (x > 0), so a stage is fitted against its own
modality. Both bases are written; ``fit_stat`` picks the one reported as ``fits``.
Shares use means, which add up (the stages' shares sum to 1): a stage's share is the sum of its
per-sample means over the sum of the per-sample mean totals; per-sample shares likewise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lmmbench.metrics.fits import linear_fit
from lmmbench.metrics.stats import quantile
from lmmbench.reports.results_csv import numeric
from lmmbench.reports.summary import per_sample_medians

__all__ = ["UNATTRIBUTED_GOAL_PCT", "build_analysis"]

UNATTRIBUTED_GOAL_PCT = 5.0


def _fits(points: dict[str, dict[str, Any]], fit_pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    fits: dict[str, Any] = {}
    for y, x in fit_pairs:
        pts = [(m[x], m[y]) for m in points.values() if math.isfinite(m[x]) and m[x] > 0 and math.isfinite(m[y])]
        fit = linear_fit([p[0] for p in pts], [p[1] for p in pts])
        fits[f"{y}~{x}"] = {"y": y, "x": x, "slope_ms_per_unit": fit.slope, "intercept_ms": fit.intercept,
                            "r2": fit.r2, "n_samples": fit.n, "x_min": fit.x_min, "x_max": fit.x_max,
                            "note": "x has a single value: no fit" if fit.n and math.isnan(fit.slope) else ""}
    return fits


def build_analysis(
    spec: str,
    rows: list[dict[str, Any]],
    stage_fields: Sequence[str],
    fit_pairs: Sequence[tuple[str, str]],
    total_field: str = "ttft_ms",
    unattributed_field: str | None = None,
    fit_stat: str = "median",
) -> dict[str, Any]:
    """Fits, shares and failures of one run's rows (as read back from the results CSV)."""
    fields = list(dict.fromkeys([*stage_fields, total_field, *(p for pair in fit_pairs for p in pair)]))
    if unattributed_field:
        fields.append(unattributed_field)
    med = per_sample_medians(rows, fields)
    mean = per_sample_medians(rows, fields, stat="mean")
    fits_by_basis = {basis: _fits(per_sample_medians(rows, fields, stat=basis), fit_pairs)
                     for basis in ("median", "min")}
    total = sum(m[total_field] for m in mean.values() if math.isfinite(m[total_field]))
    shares = {f: (sum(m[f] for m in mean.values() if math.isfinite(m[f])) / total if total > 0 else math.nan)
              for f in stage_fields}
    per_sample = {
        sid: {"group": m["group"], "n": m["n"], f"{total_field}_p50": med[sid][total_field],
              f"{total_field}_mean": m[total_field],
              **{f"{f}_share": (m[f] / m[total_field] if m[total_field] else math.nan) for f in stage_fields}}
        for sid, m in mean.items()
    }
    failed = [r for r in rows if r.get("status") != "ok"]
    degraded = sum(1 for r in failed if r.get("status") == "degraded")
    out: dict[str, Any] = {
        "spec": spec,
        "basis": "fits, shares and the unattributed goal use ok rows only (not degraded, not failed)",
        "rows_ok": len(rows) - len(failed),
        "rows_degraded": degraded,
        "rows_failed": len(failed) - degraded,
        "failures": [{"sample_id": r.get("sample_id"), "repeat": r.get("repeat"), "status": r.get("status"),
                      "error": r.get("error")}
                     for r in failed],
        "fit_basis": f"per-sample {fit_stat} over repeats, samples with x > 0",
        "fits": fits_by_basis[fit_stat],
        "fits_by_basis": fits_by_basis,
        "shares_of_" + total_field: shares,
        "per_sample": per_sample,
    }
    if unattributed_field:
        # per sample: the median over repeats of each repeat's unattributed share (a single
        # preempted repeat on a shared machine does not decide the sample)
        pct_rows: dict[str, list[float]] = {}
        for r in rows:
            if r.get("status") != "ok":
                continue
            tot, una = numeric(r.get(total_field)), numeric(r.get(unattributed_field))
            if tot > 0 and math.isfinite(una):
                pct_rows.setdefault(str(r.get("sample_id")), []).append(100.0 * una / tot)
        pcts = {sid: quantile(v, 0.5) for sid, v in pct_rows.items()}
        worst = max(pcts.values()) if pcts else math.nan
        out["unattributed"] = {
            "field": unattributed_field,
            "share_pct_overall": 100.0 * shares.get(unattributed_field, math.nan)
            if unattributed_field in shares else math.nan,
            "max_pct_per_sample": worst,
            "per_sample_basis": "median over ok repeats of unattributed / ttft",
            "rows": sum(len(v) for v in pct_rows.values()),
            "per_sample_pct": pcts,
            "goal_pct": UNATTRIBUTED_GOAL_PCT,
            "named_stages_explain_pct_min": 100.0 - worst if pcts else math.nan,
            "meets_goal": bool(pcts) and worst <= UNATTRIBUTED_GOAL_PCT,
        }
    return out
