"""Success rates with Wilson intervals, batch sizes and the time split of an episodic run.

Functions of the results rows as read back from the CSV (strings), so a resumed run's analysis
covers every episode in the file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lmmbench.metrics.quality import wilson_interval  # the one Wilson interval (accuracy under load too)

__all__ = ["cost_model_section", "episodic_findings", "success_summary", "wilson_interval"]


def _num(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _total(rows: Sequence[dict[str, Any]], field: str) -> int | None:
    values = [_num(r.get(field)) for r in rows]
    present = [int(v) for v in values if v is not None]
    return sum(present) if present else None


def _rate(successes: int, n: int) -> dict[str, Any]:
    ci = wilson_interval(successes, n)
    return {"episodes": n, "successes": successes, "success_rate": successes / n if n else None,
            "ci95_low": ci[0] if ci else None, "ci95_high": ci[1] if ci else None}


def success_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per task and overall: episodes with a verdict, successes, rate and 95 % Wilson interval."""
    judged = [r for r in rows if r.get("status") == "ok" and _num(r.get("success")) is not None]
    per_task: dict[str, dict[str, Any]] = {}
    for task in sorted({int(float(r["task"])) for r in judged}):
        mine = [r for r in judged if int(float(r["task"])) == task]
        per_task[str(task)] = _rate(sum(_num(r["success"]) == 1.0 for r in mine), len(mine))
    overall = _rate(sum(_num(r["success"]) == 1.0 for r in judged), len(judged))
    return {"overall": overall, "per_task": per_task}


def _batch_sizes(rows: Sequence[dict[str, Any]], field: str = "action_batch_sizes") -> list[int]:
    return [int(x) for r in rows if r.get("status") == "ok" for x in str(r.get(field) or "").split()]


def cost_model_section(totals: dict[str, Any] | None, serial_totals: dict[str, Any] | None,
                       speedup: dict[str, Any] | None, num_parallel: int) -> dict[str, Any] | None:
    """The design's cost model with this run's terms (the serial run's for the serial side when there is one,
    else this run's batch-1 calls) next to the measured speed-up (median and min-max, or null)."""
    if not totals or "terms" not in totals:
        return None
    from lmmbench.episodes.cost_model import predict_speedup

    serial_terms = (serial_totals or {}).get("terms") or totals["terms"]
    measured = None
    if speedup and speedup.get("median") is not None:
        measured = {k: speedup[k] for k in ("median", "min", "max", "pairs")}
    return {"terms": totals["terms"], "serial_terms": (serial_totals or {}).get("terms"),
            "serial_side_from": "the serial run" if serial_totals else "this run's batch-1 calls",
            "prediction": predict_speedup(serial_terms, totals["terms"], num_parallel),
            "measured_speedup": measured}


def _batch_parts(out: dict[str, Any], totals: dict[str, Any] | None) -> list[str]:
    """The action (and planning) batch, per call (this run's calls) and per request (every episode's calls)."""
    per_call = (totals or {}).get("mean_action_batch_per_call")
    per_request = out["episode_mean_action_batch_size"]
    parts = []
    if per_call is not None and per_request is not None:
        parts.append(f"action batch {per_call:.2f} per call, {per_request:.2f} per request")
    elif per_request is not None:
        parts.append(f"action batch {per_request:.2f} per request")
    if out["episode_mean_planning_batch_size"] not in (None, 1.0):
        parts.append(f"planning batch {out['episode_mean_planning_batch_size']:.2f} per request")
    return parts


def episodic_findings(rows: Sequence[dict[str, Any]], totals: dict[str, Any] | None,
                      serial_totals: dict[str, Any] | None, equivalence: dict[str, Any] | None,
                      speedup: dict[str, Any] | None = None, num_parallel: int = 1,
                      reference: dict[str, Any] | None = None) -> dict[str, Any]:
    """The analysis of an episodic run: success, batch sizes (per call and per request), time split, the serial
    comparison's verdict (``equivalence``, from ``episodes.verdict``), the ``--reference`` verdict and the design's
    cost model (``cost_model``: its terms, predicted and measured speed-up). ``num_parallel`` is the effective N:
    the slots that ran."""
    from lmmbench.episodes.verdict import verdict_text

    ok = [r for r in rows if r.get("status") == "ok"]
    sizes = _batch_sizes(ok)  # per episode: the batch size of each action call it joined
    plans = _batch_sizes(ok, "planning_batch_sizes")
    out: dict[str, Any] = {
        "success": success_summary(ok),
        "num_parallel_effective": num_parallel,
        # per request: the batch each request met (an episode's calls, every episode); per call: this run's calls
        "episode_mean_action_batch_size": sum(sizes) / len(sizes) if sizes else None,
        "action_batch_per_call": (totals or {}).get("mean_action_batch_per_call"),
        "action_batch_per_request": sum(sizes) / len(sizes) if sizes else None,
        "episode_mean_planning_batch_size": sum(plans) / len(plans) if plans else None,
        "steps_total": sum(int(_num(r.get("steps")) or 0) for r in ok),
        # actions within 1e-5 of a rounding boundary (toy-waypoints): where last bits could change a move
        "near_rounding_boundary_total": _total(ok, "near_rounding_boundary"),
        "run": totals,  # this process's run only (a resumed file's earlier rows are not in it)
    }
    if totals:
        wall = totals.get("wall_ms") or 0.0
        out["time_split_pct"] = {k.removesuffix("_ms"): 100.0 * totals[k] / wall if wall and totals.get(k) is not None
                                 else None for k in ("env_ms", "env_build_ms", "env_reset_ms", "env_workers_start_ms",
                                                     "planning_ms", "action_ms", "scheduler_ms")}
    if serial_totals:
        out["serial_run"] = serial_totals
    if speedup is not None:
        out["speedup_vs_serial"] = speedup  # median and min-max over interleaved pairs (episodes.speedup)
    if equivalence is not None:
        out["equivalence"] = equivalence
    if reference is not None:
        out["reference_equivalence"] = reference
    out["cost_model"] = cost_model_section(totals, serial_totals, speedup, num_parallel)
    rate = out["success"]["overall"]
    parts = [f"success {rate['successes']}/{rate['episodes']}" if rate["episodes"] else "no success verdicts"]
    parts.append(f"{num_parallel} slot(s) ran")
    parts += _batch_parts(out, totals)
    if "speedup_vs_serial" in out:
        from lmmbench.episodes.speedup import speedup_text

        parts.append(speedup_text(out["speedup_vs_serial"]))
    predicted = ((out["cost_model"] or {}).get("prediction") or {}).get("design_formula", {}).get("predicted_speedup")
    if predicted is not None and num_parallel > 1:
        parts.append(f"the design's cost model predicts {predicted:.2f}x")
    if equivalence is not None:
        parts.append(verdict_text("serial run", equivalence))
    if reference is not None:
        parts.append(verdict_text("reference", reference))
    out["finding"] = "; ".join(parts)
    named = (("serial run", equivalence), ("reference", reference))
    negative = [verdict_text(n, v) for n, v in named if v is not None and v["verdict"] == "not equivalent"]
    if negative:  # the command exits core.exit_codes.NOT_EQUIVALENT with this line
        out["negative_verdict"] = "; ".join(negative)
    return out


def served_line(served: dict[str, Any]) -> str:
    """One line about a served policy's run (``--policy ws://``): calls per second, latency percentiles, the time
    split, and the failed requests counted by cause."""
    def ms(value: Any) -> str:
        return "-" if value is None else f"{float(value):.1f}"

    split = served.get("time_split_ms") or {}
    rate = served.get("calls_per_s")
    line = (f"served: {served.get('requests', 0)} calls ({'-' if rate is None else f'{rate:.1f}'}/s), latency ms "
            f"p50 {ms(served.get('latency_ms_p50'))} p90 {ms(served.get('latency_ms_p90'))} "
            f"p99 {ms(served.get('latency_ms_p99'))}")
    if split:
        line += (f"; wall {ms(split.get('wall'))} ms = environment {ms(split.get('environment'))} + waiting for the "
                 f"server {ms(split.get('waiting_for_server'))} (inside it {ms(split.get('inside_server'))}) + "
                 f"lmmbench {ms(split.get('lmmbench'))}")
    faults = served.get("faults") or {}
    if faults:
        causes = ", ".join(f"{n} {kind}" for kind, n in sorted(faults.items()))
        line += f"; {sum(faults.values())} request(s) failed, each failing its episode: {causes}"
    return line
