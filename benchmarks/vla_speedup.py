"""Cross-episode batching speed-up of the VLA-shaped policy on Push-T, against the number of slots N.

For each N in --slots, the same episodes (tasks x trials, seeded) run with N slots; repeats are interleaved
(N = 1, 2, 4, ... then again), and the speed-up of N is the serial wall time over N's, per repeat: the table
has the median and the min-max of those ratios, and the share of wall time spent in the action expert.
Run by hand (docs/benchmarks.md):

    python benchmarks/vla_speedup.py --shape pi0-small --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def _run(shape: str, n: int, episodes: int, max_steps: int, num_layers: int | None) -> tuple[float, float, float]:
    """Wall seconds, action-expert seconds and prefix seconds of one run with ``n`` slots."""
    from lmmbench.episodes import EpisodeKey, EpisodeScheduler
    from lmmbench.episodes.pusht import PushTEnv
    from lmmbench.episodes.vla_policy import VlaPolicy

    policy = VlaPolicy(shape, num_layers=num_layers)
    keys = [EpisodeKey(t, k) for t in range(4) for k in range(episodes // 4)]
    sched = EpisodeScheduler(PushTEnv, policy, keys, num_parallel=n, num_steps_wait=1, max_steps=max_steps, seed=0)
    t0 = time.perf_counter_ns()
    results = list(sched.run())
    wall_s = (time.perf_counter_ns() - t0) / 1e9
    return wall_s, sum(r.action_ms for r in results) / 1e3, sum(r.planning_ms for r in results) / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="pi0-small", help="pi0 (GPU), pi0-small (CPU), pi0-tiny")
    ap.add_argument("--slots", default="1,2,4,8,16")
    ap.add_argument("--episodes", type=int, default=16, help="a multiple of 4 (4 tasks)")
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--num-layers", type=int, default=None)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    slots = [int(s) for s in args.slots.split(",")]
    walls: dict[int, list[float]] = {n: [] for n in slots}
    expert: dict[int, list[float]] = {n: [] for n in slots}
    _run(args.shape, slots[-1], 4, 2, args.num_layers)  # warm-up: first forwards of a process are slower
    for rep in range(args.repeats):
        for n in slots:
            wall, act_s, _ = _run(args.shape, n, args.episodes, args.max_steps, args.num_layers)
            walls[n].append(wall)
            expert[n].append(act_s / wall)
            print(f"repeat {rep} N={n}: wall {wall:.2f} s, action expert {act_s:.2f} s", file=sys.stderr, flush=True)
    base = walls[slots[0]]
    print(f"| N | wall s (median) | speed-up median | speed-up min-max | action-expert share |  "
          f"[{args.shape}, {args.episodes} episodes x {args.max_steps} steps, {args.repeats} repeats, "
          f"{args.threads} thread(s), load {os.getloadavg()[0]:.1f}]")
    print("|---|---|---|---|---|")
    for n in slots:
        ratios = [b / w for b, w in zip(base, walls[n], strict=True)]
        print(f"| {n} | {statistics.median(walls[n]):.2f} | {statistics.median(ratios):.2f}x | "
              f"{min(ratios):.2f}-{max(ratios):.2f}x | {statistics.median(expert[n]) * 100:.0f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
