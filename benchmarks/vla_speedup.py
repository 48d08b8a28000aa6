"""Cross-episode batching speed-up of the VLA-shaped policy on Push-T, as the episodic design runs it, with the
design's cost model evaluated term by term.

The workload is the design's: a PaliGemma-shaped planner at batch 1 per replan (k <= 7 waypoints), one
action-expert call per waypoint pair computing its prefix from the current frame, chunks cut by the pair's
duration (slots fall out of step), 10 warm-up steps, one task per slot (``--steal`` adds rows with trial stealing).
For each N in --slots the same episodes (--tasks tasks x --trials trials, seeded) run on N slots; repeats are
interleaved (N = 1, 2, 4, ... then again). The speed-up of N is the serial wall time over N's, per repeat (median,
min-max). Each row also gives the design's terms, timed separately in the runs (medians of their own calls,
then the median over the repeats):
T_vlm per planner call, T_ae(1) and T_ae(N) per action-expert call, T_env per env step, waypoints per replan and
env steps per episode, and the speed-up the design's formula predicts from them (``episodes.cost_model``:
``design`` assumes every call batches N slots, ``run batches`` uses the batch sizes the run really had), per
repeat from that repeat's serial and N-slot runs (the same load), median and min-max like the measured one.
``--ae-only`` instead times one action-expert call at batch 1, 2, 4, ... alone (interleaved repeats).
Run by hand (docs/benchmarks.md):

    python benchmarks/vla_speedup.py --shape pi0-tiny --repeats 3 --steal
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def _run(shape: str, n: int, tasks: int, trials: int, max_steps: int, wait: int, steal: bool,
         batched_planning: bool) -> tuple[float, dict[str, Any]]:
    """Wall seconds and the run's totals (``RunTotals.as_dict()``) of one run on ``n`` slots."""
    from lmmbench.episodes import EpisodeKey, EpisodeScheduler
    from lmmbench.episodes.envs.pusht import PushTEnv
    from lmmbench.episodes.policies.vla import VlaPolicy

    policy = VlaPolicy(shape, batched_planning=batched_planning)
    keys = [EpisodeKey(t, k) for t in range(tasks) for k in range(trials)]
    sched = EpisodeScheduler(PushTEnv, policy, keys, num_parallel=n, num_steps_wait=wait, max_steps=max_steps,
                             seed=0, steal_trials=steal)
    t0 = time.perf_counter_ns()
    for _ in sched.run():
        pass
    return (time.perf_counter_ns() - t0) / 1e9, sched.totals.as_dict()


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _spread(values: list[float]) -> str:
    ok = [v for v in values if v is not None]
    if not ok:
        return "—"
    return f"{statistics.median(ok):.2f}× ({min(ok):.2f}–{max(ok):.2f})"


def _term(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else None


def _row(n: int, steal: bool, walls: list[float], base: list[float], totals: list[dict[str, Any]],
         serial: list[dict[str, Any]]) -> str:
    """One table row: per repeat, the measured ratio and the cost model's prediction from the terms of that
    repeat's serial and N-slot runs (same load); medians and min-max over the repeats."""
    from lmmbench.episodes.cost_model import predict_speedup

    preds = [predict_speedup(s["terms"], t["terms"], n) for s, t in zip(serial, totals, strict=True)]
    ratios = [b / w for b, w in zip(base, walls, strict=True)]
    k = statistics.median((t["terms"]["waypoints_per_replan"] or {}).get("mean") or 0.0 for t in totals)
    steps = statistics.median((t["terms"]["steps_per_episode"] or {}).get("mean") or 0.0 for t in totals)
    batch = statistics.median(t["mean_action_batch_size"] for t in totals)
    return (f"| {n} | {'on' if steal else 'off'} | {statistics.median(walls):.2f} | {_spread(ratios)} | "
            f"{_ms(_term(preds, 't_vlm_ms'))} | {_ms(_term(preds, 't_ae_1_ms'))} | {_ms(_term(preds, 't_ae_n_ms'))} | "
            f"{_ms(_term(preds, 't_env_ms'))} | {k:.2f} | {steps:.1f} | {batch:.2f} | "
            f"{_spread([p['design_formula']['predicted_speedup'] for p in preds])} | "
            f"{_spread([p['run_batches']['predicted_speedup'] for p in preds])} |")


def _ae_alone(shape: str, sizes: list[int], repeats: int) -> None:
    """One ``sample_actions`` call (fresh prefix + 10 denoising steps) at each batch size, interleaved repeats."""
    import numpy as np

    from lmmbench.episodes import ActItem, EpisodeKey
    from lmmbench.episodes.policies.vla import VlaPolicy

    policy = VlaPolicy(shape)
    rng = np.random.default_rng(0)
    batches = {}
    for b in sizes:
        items = []
        for i in range(b):
            obs = {"image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8), "state": rng.random(2),
                   "instruction": "push the T onto the target"}
            items.append(ActItem(policy.new_episode(EpisodeKey(i, 0), i), obs, {}))
        policy.plan(items)
        batches[b] = items
    times: dict[int, list[float]] = {b: [] for b in sizes}
    for _ in range(repeats + 1):  # the first round warms up
        for b, items in batches.items():
            for it in items:
                it.memory.data["pair"] = 0
            t0 = time.perf_counter_ns()
            policy.act(items)
            times[b].append((time.perf_counter_ns() - t0) / 1e6)
    print(f"[{shape}, one action-expert call alone, {repeats} repeats, load {os.getloadavg()[0]:.1f}]")
    print("| batch | ms (median) | min–max | ms per slot |")
    print("|---|---|---|---|")
    for b, v in times.items():
        v = v[1:]
        print(f"| {b} | {statistics.median(v):.1f} | {min(v):.1f}–{max(v):.1f} | {statistics.median(v) / b:.1f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="pi0-tiny", help="pi0 (GPU), pi0-small (CPU), pi0-tiny")
    ap.add_argument("--slots", default="1,2,4,8,16")
    ap.add_argument("--tasks", type=int, default=16, help="tasks (the design: num_parallel = num_tasks)")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--num-steps-wait", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steal", action="store_true", help="also rows with trial stealing on")
    ap.add_argument("--batched-planning", action="store_true", help="batch the planner (not the design's)")
    ap.add_argument("--ae-only", action="store_true", help="time one action-expert call per batch size alone")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    slots = [int(s) for s in args.slots.split(",")]
    if args.ae_only:
        _ae_alone(args.shape, slots, args.repeats)
        return 0
    modes = [False, True] if args.steal else [False]
    cells = [(n, s) for s in modes for n in slots if not (s and n == 1)]
    walls: dict[tuple[int, bool], list[float]] = {c: [] for c in cells}
    totals: dict[tuple[int, bool], list[dict[str, Any]]] = {c: [] for c in cells}
    common = (args.tasks, args.trials, args.max_steps, args.num_steps_wait)
    _run(args.shape, slots[-1], min(args.tasks, 4), 1, 4, 1, False, args.batched_planning)  # warm-up
    for rep in range(args.repeats):
        for n, steal in cells:
            wall, tot = _run(args.shape, n, *common, steal, args.batched_planning)
            walls[(n, steal)].append(wall)
            totals[(n, steal)].append(tot)
            print(f"repeat {rep} N={n} steal={steal}: wall {wall:.2f} s", file=sys.stderr, flush=True)
    base, serial = walls[(slots[0], False)], totals[(slots[0], False)]
    print(f"[{args.shape}, {args.tasks} tasks x {args.trials} trials, max {args.max_steps} steps, "
          f"{args.num_steps_wait} warm-up steps, planner {'batched' if args.batched_planning else 'batch 1'}, "
          f"{args.repeats} repeats, {args.threads} thread(s), load {os.getloadavg()[0]:.1f}]")
    print("| N | steal | wall s (median) | measured speed-up (min–max) | T_vlm ms | T_ae(1) ms | T_ae(N) ms | "
          "T_env ms | k | steps | mean AE batch | predicted (design) | predicted (run batches) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n, steal in cells:
        print(_row(n, steal, walls[(n, steal)], base, totals[(n, steal)], serial))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
