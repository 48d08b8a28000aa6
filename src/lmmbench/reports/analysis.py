"""The analysis file: linear fits of stages against token counts, stage shares, unattributed share.

Fits use per-sample medians (one point per sample, robust to a noisy repeat) over the samples
where the x quantity is present (x > 0), so a stage is fitted against its own modality.
Shares are each stage's sum of per-sample medians over the sum of total (TTFT) medians.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmmbench.metrics.fits import linear_fit
from lmmbench.reports.summary import per_sample_medians

__all__ = ["UNATTRIBUTED_GOAL_PCT", "build_analysis", "write_json"]

UNATTRIBUTED_GOAL_PCT = 5.0


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if not math.isfinite(obj) else round(obj, 6)
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_json(data: dict[str, Any], path: Path) -> Path:
    """Write ``data`` as indented JSON (NaN / inf become null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(data), indent=2, default=str) + "\n", encoding="utf-8")
    return path


def build_analysis(
    spec: str,
    rows: list[dict[str, Any]],
    stage_fields: Sequence[str],
    fit_pairs: Sequence[tuple[str, str]],
    total_field: str = "ttft_ms",
    unattributed_field: str | None = None,
) -> dict[str, Any]:
    """Fits, shares and failures of one run's rows (as read back from the results CSV)."""
    fields = list(dict.fromkeys([*stage_fields, total_field, *(p for pair in fit_pairs for p in pair)]))
    if unattributed_field:
        fields.append(unattributed_field)
    med = per_sample_medians(rows, fields)
    fits: dict[str, Any] = {}
    for y, x in fit_pairs:
        pts = [(m[x], m[y]) for m in med.values() if math.isfinite(m[x]) and m[x] > 0 and math.isfinite(m[y])]
        fit = linear_fit([p[0] for p in pts], [p[1] for p in pts])
        fits[f"{y}~{x}"] = {"y": y, "x": x, "slope_ms_per_unit": fit.slope, "intercept_ms": fit.intercept,
                            "r2": fit.r2, "n_samples": fit.n, "x_min": fit.x_min, "x_max": fit.x_max}
    total = sum(m[total_field] for m in med.values() if math.isfinite(m[total_field]))
    shares = {f: (sum(m[f] for m in med.values() if math.isfinite(m[f])) / total if total > 0 else math.nan)
              for f in stage_fields}
    per_sample = {
        sid: {"group": m["group"], "n": m["n"], f"{total_field}_p50": m[total_field],
              **{f"{f}_share": (m[f] / m[total_field] if m[total_field] else math.nan) for f in stage_fields}}
        for sid, m in med.items()
    }
    failed = [r for r in rows if r.get("status") != "ok"]
    out: dict[str, Any] = {
        "spec": spec,
        "rows_ok": len(rows) - len(failed),
        "rows_failed": len(failed),
        "failures": [{"sample_id": r.get("sample_id"), "repeat": r.get("repeat"), "error": r.get("error")}
                     for r in failed],
        "fit_basis": "per-sample medians over samples with x > 0",
        "fits": fits,
        "shares_of_" + total_field: shares,
        "per_sample": per_sample,
    }
    if unattributed_field:
        pcts = {sid: 100.0 * m[unattributed_field] / m[total_field]
                for sid, m in med.items() if m[total_field] and math.isfinite(m[unattributed_field])}
        worst = max(pcts.values()) if pcts else math.nan
        out["unattributed"] = {
            "field": unattributed_field,
            "share_pct_overall": 100.0 * shares.get(unattributed_field, math.nan)
            if unattributed_field in shares else math.nan,
            "max_pct_per_sample": worst,
            "per_sample_pct": pcts,
            "goal_pct": UNATTRIBUTED_GOAL_PCT,
            "named_stages_explain_pct_min": 100.0 - worst if pcts else math.nan,
            "meets_goal": bool(pcts) and worst <= UNATTRIBUTED_GOAL_PCT,
        }
    return out
