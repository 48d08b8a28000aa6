"""Wall time of an episodic evaluation, serial vs N parallel slots, with the time split per part.

    .venv/bin/python benchmarks/episodic_speedup.py [--parallel 1,2,4,8,16] [--num-tasks 16]
        [--num-trials-per-task 4] [--repeats 3] [--policy toy] [--out outputs/episodic_speedup.json]

Every configuration evaluates the same episodes (``--num-tasks`` x ``--num-trials-per-task`` of
``toy-waypoints``, default policy ``toy``, one torch thread) through ``EpisodeScheduler``; N=1
is the serial evaluation. Repeats are interleaved (1, 2, 4, ... then again) so a burst of load on a
shared machine hits one repeat of every N, and the table gives the median wall time with its
min..max, the speed-up of the medians over N=1, the mean action batch size and the share of wall
time in env steps / planning / the action expert / the scheduler itself. The process's CPU time
(one torch thread) and its speed-up are reported too: on a shared machine they move less with
other processes' load than wall time does. Every N must give the
serial run's per-episode success and step counts (exit code 1 otherwise). Nothing sleeps: all
time is real work.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from lmmbench.core.environment import capture_environment
from lmmbench.episodes import EpisodeKey, EpisodeScheduler, PolicySettings, make_policy, resolve_suite


def _one_run(suite: Any, policy: Any, episodes: list[EpisodeKey], n: int, args: argparse.Namespace) -> dict[str, Any]:
    sched = EpisodeScheduler(suite.make_env, policy, episodes, num_parallel=n, num_steps_wait=args.num_steps_wait,
                             max_steps=args.max_steps or suite.default_max_steps, seed=args.seed,
                             steal_trials=not args.no_steal_trials)
    cpu0 = time.process_time()
    outcomes = {r.key.id: (r.success, r.steps) for r in sched.run()}
    cpu_ms = (time.process_time() - cpu0) * 1000.0  # this process's CPU time: less sensitive to other load
    return {"totals": sched.totals.as_dict() | {"cpu_ms": cpu_ms}, "outcomes": outcomes}


def _summarise(runs: list[dict[str, Any]], serial_median: float, serial_cpu: float) -> dict[str, Any]:
    walls = [r["totals"]["wall_ms"] for r in runs]
    med = statistics.median(walls)
    cpu = statistics.median(r["totals"]["cpu_ms"] for r in runs)
    parts = {}
    for part in ("env_ms", "env_build_ms", "env_reset_ms", "planning_ms", "action_ms", "scheduler_ms"):
        parts[part.removesuffix("_ms") + "_pct"] = statistics.median(  # planning_ms is null without a planner
            100.0 * (r["totals"][part] or 0.0) / r["totals"]["wall_ms"] for r in runs)
    first = runs[0]["totals"]
    return {"wall_ms_median": med, "wall_ms_min": min(walls), "wall_ms_max": max(walls),
            "speedup": serial_median / med, "cpu_ms_median": cpu, "cpu_speedup": serial_cpu / cpu,
            "ticks": first["ticks"], "action_calls": first["action_calls"],
            "mean_action_batch_size": first["mean_action_batch_size"],
            "action_ms_per_call": statistics.median(r["totals"]["action_ms"] / r["totals"]["action_calls"]
                                                    for r in runs), **parts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parallel", default="1,2,4,8,16")
    ap.add_argument("--env", default="toy-waypoints")
    ap.add_argument("--policy", default=None)
    ap.add_argument("--num-tasks", type=int, default=16)
    ap.add_argument("--num-trials-per-task", type=int, default=4)
    ap.add_argument("--num-steps-wait", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-steal-trials", action="store_true", help="one task per slot, in order")
    ap.add_argument("--out", type=Path, default=Path("outputs/episodic_speedup.json"))
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    ns = [int(x) for x in args.parallel.split(",")]
    suite = resolve_suite(args.env)
    policy = make_policy(args.policy or suite.default_policy, PolicySettings(weight_seed=args.seed))
    episodes = [EpisodeKey(t, r) for t in range(args.num_tasks) for r in range(args.num_trials_per_task)]
    _one_run(suite, policy, [EpisodeKey(0, -1), EpisodeKey(1, -1)], 2, args)  # warm-up, unrecorded
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in ns}
    for rep in range(args.repeats):
        for n in ns:
            runs[n].append(_one_run(suite, policy, episodes, n, args))
            print(f"repeat {rep} N={n}: {runs[n][-1]['totals']['wall_ms']:.0f} ms", file=sys.stderr)
    reference = runs[min(ns)][0]["outcomes"]
    mismatched = {n: sorted(k for k, v in r["outcomes"].items() if reference.get(k) != v)
                  for n, rs in runs.items() for r in rs}
    serial_median = statistics.median(r["totals"]["wall_ms"] for r in runs[min(ns)])
    serial_cpu = statistics.median(r["totals"]["cpu_ms"] for r in runs[min(ns)])
    table = {str(n): _summarise(rs, serial_median, serial_cpu) for n, rs in runs.items()}
    successes = sum(bool(s) for s, _ in reference.values())
    report = {"config": vars(args) | {"out": str(args.out)}, "episodes": len(episodes),
              "success_rate": successes / len(reference), "per_n": table,
              "outcome_mismatches": {str(n): m for n, m in mismatched.items() if m},
              "environment": capture_environment()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"{len(episodes)} episodes, success {successes}/{len(reference)}; median of {args.repeats} (min..max)")
    print("| N | wall ms | speed-up | x/N | CPU ms | CPU speed-up | mean AE batch | AE ms/call | env % | planning % "
          "| action % | scheduler % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in ns:
        t = table[str(n)]
        print(f"| {n} | {t['wall_ms_median']:.0f} ({t['wall_ms_min']:.0f}..{t['wall_ms_max']:.0f}) | "
              f"{t['speedup']:.2f} | {t['speedup'] / n:.2f} | {t['cpu_ms_median']:.0f} | {t['cpu_speedup']:.2f} | "
              f"{t['mean_action_batch_size']:.2f} | "
              f"{t['action_ms_per_call']:.2f} | {t['env_pct']:.1f} | {t['planning_pct']:.1f} | "
              f"{t['action_pct']:.1f} | {t['scheduler_pct']:.1f} |")
    if report["outcome_mismatches"]:
        print(f"episodes differ from the serial run: {report['outcome_mismatches']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
