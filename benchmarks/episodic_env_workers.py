"""Environment steps in worker processes with a sleeping simulator: time per tick vs workers.

    .venv/bin/python benchmarks/episodic_env_workers.py [--slots 8] [--workers 0,1,2,4,8]
        [--sleep-ms 20] [--steps 10] [--repeats 5]

Every slot's environment sleeps ``--sleep-ms`` per step (a stand-in for a slow simulator; the
sleep is the only work); the policy acts with zeros, so nearly all time is env steps. ``--slots``
episodes of ``--steps`` steps run on ``--slots`` slots; workers 0 means in-process (one step after
another). Repeats are interleaved over the worker counts. The expected time per tick is
``ceil(slots / W) * sleep`` (``slots * sleep`` in-process); the table gives the measured median
ms per tick with its min..max next to it.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from lmmbench.episodes import EpisodeKey, EpisodeMemory, EpisodeScheduler


class SleepyEnv:
    """Sleeps SLEEP_S per step."""

    sleep_s = 0.02

    def __init__(self, task: int) -> None:
        self.task = task

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        return np.zeros(1), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        time.sleep(self.sleep_s)
        return np.zeros(1), 0.0, False, False, {}


class ZeroPolicy:
    """Acts with zeros; no model work."""

    name = "zero"
    batched_planning = False

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        return EpisodeMemory(key=key, seed=seed)

    def dummy_action(self) -> int:
        return 0

    def plan(self, items: Sequence[Any]) -> None:
        del items

    def needs_plan(self, item: Any) -> bool:
        return False

    def act(self, items: Sequence[Any]) -> list[list[int]]:
        return [[0] for _ in items]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--workers", default="0,1,2,4,8")
    ap.add_argument("--sleep-ms", type=float, default=20.0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    SleepyEnv.sleep_s = args.sleep_ms / 1000.0
    counts = [int(w) for w in args.workers.split(",")]
    per_tick: dict[int, list[float]] = {w: [] for w in counts}
    for _ in range(args.repeats):
        for w in counts:
            sched = EpisodeScheduler(SleepyEnv, ZeroPolicy(), [EpisodeKey(t, 0) for t in range(args.slots)],
                                     num_parallel=args.slots, num_steps_wait=0, max_steps=args.steps, seed=0,
                                     env_workers=w)
            for _r in sched.run():
                pass
            per_tick[w].append(sched.totals.wall_ns / 1e6 / sched.totals.ticks)
    print(f"{args.slots} slots, {args.sleep_ms:g} ms sleep per step, {args.steps} steps; median of {args.repeats}")
    print("| workers | expected ms/tick | measured ms/tick (min..max) |")
    print("|---|---|---|")
    for w, vals in per_tick.items():
        expected = (math.ceil(args.slots / w) if w else args.slots) * args.sleep_ms
        print(f"| {w or 'in-process'} | {expected:.0f} | {statistics.median(vals):.1f} "
              f"({min(vals):.1f}..{max(vals):.1f}) |")


if __name__ == "__main__":
    main()
