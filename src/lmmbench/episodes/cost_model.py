"""The episodic design's cost model, evaluated with separately timed terms.

The design (N = num_parallel, ``k`` waypoints per replan, ``steps`` env steps per episode) writes:

* serial: ``N × (T_vlm + k·T_ae + steps·T_env)``;
* parallel: ``T_vlm_serial + T_ae_batched/N + steps·T_env_parallel``: the VLM stays at batch 1, one slot after
  another, an action-expert call serves N slots, and the env steps are as before (or in worker processes).

Per episode, with R replans per episode (the design counts one) and k action-expert calls per replan (the
waypoints, fewer when an episode ends inside a plan), that is ``R·(T_vlm + k·T_ae(1)) + steps·T_env`` serially
and ``R·(T_vlm + k·T_ae(N)/N) + steps·T_env_parallel`` batched;
``predicted_speedup`` is their ratio (``design_formula``). ``T_ae(N)`` is the median of the run's calls of batch
N: the design assumes every call batches all N slots; when slots fall out of step no call may have had N.
``run_batches`` is lmmbench's refinement: the same terms weighted by the batch sizes the run's calls really had
(its histograms), ``Σ_B calls(B)·T(B) / episodes``. Each term is the median of its own calls (with min, max and
p10 / p90), never a share of a wall time; a term that was not measured leaves the prediction null and says
which. ``T_env_parallel`` is the median env step scaled by the env phases' wall time over the sum of their steps'
own times: the median itself in this process, less with ``--env-workers`` (slots stepped at once).
"""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["predict_speedup", "run_terms", "term_stats"]


def term_stats(values: list[float]) -> dict[str, Any] | None:
    """Median with its spread (min, max, p10, p90) and the count; None when nothing was timed."""
    if not values:
        return None
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * (len(ordered) - 1) + 0.5))]

    return {"n": len(values), "median_ms": statistics.median(values), "min_ms": ordered[0],
            "max_ms": ordered[-1], "p10_ms": q(0.1), "p90_ms": q(0.9)}


def _mean(values: list[int]) -> dict[str, Any] | None:
    if not values:
        return None
    return {"n": len(values), "mean": sum(values) / len(values), "min": min(values), "max": max(values)}


def _env_parallel(totals: Any) -> float | None:
    """The median env step scaled by how much the env phases' wall time undercuts the sum of their steps' own
    times: the median itself in this process, less with ``--env-workers`` stepping slots at once."""
    if not totals.env_step_ms or sum(totals.env_step_ms) <= 0:
        return None
    return float(statistics.median(totals.env_step_ms) * min(1.0, totals.env_ns / 1e6 / sum(totals.env_step_ms)))


def run_terms(totals: Any) -> dict[str, Any]:
    """The terms of one run (a ``scheduler.RunTotals``): T_vlm per call and T_ae per call by batch size,
    T_env per step, waypoints and action calls per replan, steps and replans per episode."""
    replans = sum(totals.episode_replans)
    joined = sum(totals.action_batch_sizes)  # action-expert requests: one per slot per call it joined
    return {
        "t_vlm_ms_by_batch": {str(b): term_stats(v) for b, v in sorted(totals.planning_call_ms.items())},
        "t_ae_ms_by_batch": {str(b): term_stats(v) for b, v in sorted(totals.action_call_ms.items())},
        "t_env_ms_per_step": term_stats(totals.env_step_ms),
        "t_env_parallel_ms_per_step": _env_parallel(totals),
        "waypoints_per_replan": _mean(totals.plan_sizes),
        "ae_calls_per_replan": joined / replans if replans else None,
        "ae_calls_per_episode": joined / len(totals.episode_steps) if totals.episode_steps else None,
        "steps_per_episode": _mean(totals.episode_steps),
        "replans_per_episode": _mean(totals.episode_replans),
        "episodes": len(totals.episode_steps),
    }


def _median(terms: dict[str, Any], key: str, batch: int) -> float | None:
    stat = (terms.get(key) or {}).get(str(batch))
    return None if stat is None else float(stat["median_ms"])


def _weighted(terms: dict[str, Any], key: str) -> float | None:
    """Σ_B calls(B)·median T(B): the run's calls of that kind at their own batch sizes' medians."""
    by_batch = terms.get(key) or {}
    return sum(s["n"] * s["median_ms"] for s in by_batch.values() if s) if by_batch else None


def _per_episode(terms: dict[str, Any], t_vlm: float | None, t_ae: float | None, t_env: float | None,
                 ) -> float | None:
    """``R·T_vlm + A·T_ae + steps·T_env`` (A = action calls per episode = R·k); None when a term is missing."""
    r, a, steps = terms.get("replans_per_episode"), terms.get("ae_calls_per_episode"), terms.get("steps_per_episode")
    if r is None or a is None or steps is None or t_env is None:
        return None
    if (r["mean"] and t_vlm is None) or (a and t_ae is None):
        return None
    return float(r["mean"] * (t_vlm or 0.0) + a * (t_ae or 0.0) + steps["mean"] * t_env)


def predict_speedup(serial: dict[str, Any], parallel: dict[str, Any], num_parallel: int) -> dict[str, Any]:
    """The design's predicted speed-up of ``parallel`` (a run on ``num_parallel`` slots) over ``serial`` (the
    serial run's terms, or the same run's batch-1 calls), and the refinement with the run's real batch sizes."""
    n = num_parallel
    t_vlm1, t_ae1 = _median(serial, "t_vlm_ms_by_batch", 1), _median(serial, "t_ae_ms_by_batch", 1)
    t_env = (serial.get("t_env_ms_per_step") or {}).get("median_ms")
    t_env_par = parallel.get("t_env_parallel_ms_per_step")
    t_aen = _median(parallel, "t_ae_ms_by_batch", n)
    serial_ms = _per_episode(serial, t_vlm1, t_ae1, t_env)
    design_ms = _per_episode(parallel, t_vlm1, None if t_aen is None else t_aen / n, t_env_par)
    out: dict[str, Any] = {
        "num_parallel": n, "t_vlm_ms": t_vlm1, "t_ae_1_ms": t_ae1, "t_ae_n_ms": t_aen, "t_env_ms": t_env,
        "t_env_parallel_ms": t_env_par, "serial_ms_per_episode": serial_ms,
        "design_formula": {"parallel_ms_per_episode": design_ms,
                           "predicted_speedup": serial_ms / design_ms if serial_ms and design_ms else None},
    }
    episodes, vlm, ae = parallel.get("episodes") or 0, _weighted(parallel, "t_vlm_ms_by_batch"), _weighted(
        parallel, "t_ae_ms_by_batch")
    steps = parallel.get("steps_per_episode")
    run_ms = None
    if episodes and steps and t_env_par is not None:
        run_ms = ((vlm or 0.0) + (ae or 0.0)) / episodes + steps["mean"] * t_env_par
    out["run_batches"] = {"parallel_ms_per_episode": run_ms,
                          "predicted_speedup": serial_ms / run_ms if serial_ms and run_ms else None}
    missing = [name for name, v in (("T_vlm(1)", t_vlm1), ("T_ae(1)", t_ae1), (f"T_ae({n})", t_aen),
                                    ("T_env", t_env)) if v is None]
    out["not_measured"] = missing or None
    return out
