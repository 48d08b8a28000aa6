"""Environment steps in worker processes: the same outcomes as in-process environments, and with a
sleeping simulator the step intervals of slots in different workers overlap within a tick (structure,
not absolute speed)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from lmmbench.episodes import EpisodeKey, EpisodeMemory, EpisodeScheduler, PolicySettings, make_policy
from lmmbench.episodes.suites import resolve_suite

SLEEP_S = 0.03


def _run(workers: int, n: int = 4) -> tuple[dict[str, Any], EpisodeScheduler]:
    suite = resolve_suite("toy-waypoints")
    policy = make_policy("toy", PolicySettings())
    episodes = [EpisodeKey(t, r) for t in range(3) for r in range(2)]
    sched = EpisodeScheduler(suite.make_env, policy, episodes, num_parallel=n, num_steps_wait=1, max_steps=10,
                             seed=0, env_workers=workers)
    return {r.key.id: r for r in sched.run()}, sched


def test_worker_envs_give_the_same_outcomes_as_in_process_ones() -> None:
    local, local_sched = _run(0)
    remote, sched = _run(2)
    # the workers' start-up is a term of its own (none in-process), and the parts still sum to the wall time
    assert local_sched.totals.as_dict()["env_workers_start_ms"] == 0
    totals = sched.totals.as_dict()
    assert totals["env_workers_start_ms"] > 0
    parts = ("env_ms", "env_build_ms", "env_reset_ms", "env_workers_start_ms", "planning_ms", "action_ms",
             "scheduler_ms")
    assert sum(totals[k] or 0.0 for k in parts) == pytest.approx(totals["wall_ms"], abs=1e-3)
    assert sorted(local) == sorted(remote) and len(local) == 6
    for sid, r in local.items():
        other = remote[sid]
        assert (r.success, r.steps, r.total_reward, r.extra["warmup_steps"]) == \
            (other.success, other.steps, other.total_reward, other.extra["warmup_steps"]), sid
        assert all(np.array_equal(a, b) for a, b in zip(r.trace, other.trace, strict=True)), sid
    assert sched._pool is None  # workers are stopped when the run ends


class SleepyEnv:
    """Every step sleeps SLEEP_S and reports when it ran and in which process."""

    def __init__(self, task: int) -> None:
        self.task = task

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        return np.zeros(1), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        t0 = time.perf_counter_ns()
        time.sleep(SLEEP_S)
        return np.zeros(1), 0.0, False, False, {"t0": t0, "t1": time.perf_counter_ns(), "pid": os.getpid()}


class Recorder:
    """Acts with zeros and keeps, per action call, the step intervals its items just went through."""

    name = "recorder"
    batched_planning = False

    def __init__(self) -> None:
        self.ticks: list[list[tuple[int, int, int]]] = []

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        return EpisodeMemory(key=key, seed=seed)

    def dummy_action(self) -> int:
        return 0

    def plan(self, items: Sequence[Any]) -> None:
        del items

    def needs_plan(self, item: Any) -> bool:
        return False

    def act(self, items: Sequence[Any]) -> list[list[int]]:
        self.ticks.append([(it.info["t0"], it.info["t1"], it.info["pid"]) for it in items if "pid" in it.info])
        return [[0] for _ in items]


def test_step_intervals_of_slots_in_different_workers_overlap() -> None:
    policy = Recorder()
    episodes = [EpisodeKey(t, 0) for t in range(4)]
    sched = EpisodeScheduler(SleepyEnv, policy, episodes, num_parallel=4, num_steps_wait=0, max_steps=4, seed=0,
                             env_workers=2)
    assert len(list(sched.run())) == 4
    full = [tick for tick in policy.ticks if len(tick) == 4]  # ticks where all 4 slots had just stepped
    assert len(full) >= 2
    for tick in full:
        pids = {pid for _, _, pid in tick}
        assert len(pids) == 2 and os.getpid() not in pids  # two workers, none of it in this process
        by_worker = [sorted((t0, t1) for t0, t1, pid in tick if pid == p) for p in sorted(pids)]
        for steps in by_worker:  # one worker steps its slots one after another
            assert len(steps) == 2 and steps[0][1] <= steps[1][0], steps
        for (a0, a1), (b0, b1) in zip(*by_worker, strict=True):  # the k-th steps of the two workers overlap
            assert min(a1, b1) > max(a0, b0), (by_worker,)
        span = max(t1 for _, t1, _ in tick) - min(t0 for t0, _, _ in tick)
        assert span < sum(t1 - t0 for t0, t1, _ in tick)  # the tick's steps took less than one after another


def test_env_workers_act_at_one_slot_too(tmp_path: Any) -> None:
    """--env-workers at --num-parallel 1 puts the one slot's environment in a worker (it was accepted and ignored:
    an N = 1 run stepped in this process); the outcomes are the in-process run's."""
    import csv
    import json

    from lmmbench.cli.main import main

    runs = {}
    for workers in (0, 1):
        out = tmp_path / f"w{workers}"
        assert main(["run", "episodic-eval", "--num-tasks", "2", "--num-trials-per-task", "1", "--max-steps", "4",
                     "--num-steps-wait", "0", "--warmup", "0", "--num-parallel", "1", "--env-workers", str(workers),
                     "--no-progress", "--out-dir", str(out)]) == 0  # fmt: skip
        spec = out / "episodic-eval"
        start_ms = json.loads((spec / "episodic-eval_analysis.json").read_text())["run"]["env_workers_start_ms"]
        with (spec / "episodic-eval_results.csv").open() as fh:
            outcomes = [(r["sample_id"], r["success"], r["steps"], r["total_reward"]) for r in csv.DictReader(fh)]
        runs[workers] = start_ms, outcomes
    assert runs[0][0] == 0 and runs[1][0] > 0
    assert runs[0][1] == runs[1][1] and len(runs[0][1]) == 2
