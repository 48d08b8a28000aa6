"""An honest speed-up of batched over serial evaluation: interleaved pairs, median and spread.

``--compare-serial`` times the same episodes on one slot (serial) and on ``--num-parallel`` slots
(batched), alternating serial, batched, serial, batched ... ``repeats`` times each, so a burst of
load on a shared machine hits both sides. Each pair gives a ratio serial / batched; the result is
the median ratio with its min-max spread. Batching N episodes cannot be more than N times faster
than running them one by one, so a ratio above N is a measurement error (load, clock, a warm
cache on one side): it is flagged and the comparison gives no speed-up at all.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from lmmbench.core.clock import now_ns, ns_to_ms

__all__ = ["interleaved_walls", "speedup_summary", "speedup_text"]


def interleaved_walls(run_serial: Callable[[], object], run_batched: Callable[[], object],
                      repeats: int) -> tuple[list[float], list[float]]:
    """Wall ms of ``repeats`` serial and batched runs, interleaved (serial first in each pair); a run that
    returns an int has spent that many ns on one-off setup (CUDA-graph captures), left out of its wall."""
    serial: list[float] = []
    batched: list[float] = []
    for _ in range(repeats):
        for run, walls in ((run_serial, serial), (run_batched, batched)):
            t0 = now_ns()
            setup = run()
            walls.append(ns_to_ms(now_ns() - t0 - (setup if isinstance(setup, int) else 0)))
    return serial, batched


def speedup_summary(serial_ms: list[float], batched_ms: list[float], num_parallel: int,
                    episodes: int, env_workers: int = 0, batched_action: bool = True) -> dict[str, Any]:
    """Median ratio serial / batched over the pairs with its min-max; None with ``measurement_error``
    when a ratio exceeds ``num_parallel`` (batching N slots cannot beat serial by more than N).
    ``batched_action=False`` (a policy that takes one observation per call): every action call had batch 1
    on both sides, which ``compared`` and ``action_call_batch_size`` (1) say; the ratio is no batching's."""
    ratios = [s / b if b > 0 else float("inf") for s, b in zip(serial_ms, batched_ms, strict=True)]
    above = [r for r in ratios if r > num_parallel]
    workers = f" with env steps in {env_workers} worker processes" if env_workers else ""
    compared = (f"batched on {num_parallel} slots{workers} vs serial on 1 slot, the same {episodes} episodes, "
                f"{len(ratios)} interleaved pairs")
    if not batched_action:
        compared = (f"{num_parallel} slots{workers} vs 1 slot, the same {episodes} episodes, {len(ratios)} "
                    "interleaved pairs; the policy takes one observation per call, so every action call had batch "
                    "1 on both sides: not a batching speed-up")
    out: dict[str, Any] = {"compared": compared, "num_parallel": num_parallel, "pairs": len(ratios),
                           "action_call_batch_size": None if batched_action else 1,
                           "serial_wall_ms": serial_ms, "batched_wall_ms": batched_ms, "ratios": ratios,
                           "median": None, "min": None, "max": None, "measurement_error": None}
    if not ratios:
        return out
    if above:
        out["measurement_error"] = (f"{len(above)} of {len(ratios)} ratios exceed N = {num_parallel} (largest "
                                    f"{max(above):.2f}), which batching cannot do: the timings are not trusted")
        return out
    out.update(median=statistics.median(ratios), min=min(ratios), max=max(ratios))
    return out


def speedup_text(summary: dict[str, Any]) -> str:
    """One line: the median and spread, or the measurement error."""
    if summary.get("measurement_error"):
        return f"speed-up not measured ({summary['measurement_error']})"
    if summary.get("median") is None:
        return "speed-up not measured"
    if summary.get("action_call_batch_size") == 1:
        return (f"wall ratio serial / {summary['num_parallel']} slots {summary['median']:.2f} (median; min "
                f"{summary['min']:.2f}, max {summary['max']:.2f}; {summary['compared']})")
    return (f"{summary['median']:.2f}x faster than serial (median; min {summary['min']:.2f}x, max "
            f"{summary['max']:.2f}x; {summary['compared']})")
