"""A spawned environment worker killed mid-run (episodes.envs.workers): the episodes of its slots fail naming the
cause, the other slots' episodes finish, and no worker process is left. Real processes: the environment of task 1
sends SIGKILL to its own worker at its second step."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from typing import Any

import numpy as np

from lmmbench.episodes import ActItem, EpisodeKey, EpisodeMemory, EpisodeScheduler

KILL_TASK, KILL_AT_STEP = 1, 2


class KillerEnv:
    """Ends after 4 steps with success; task ``KILL_TASK`` kills the process it lives in at step ``KILL_AT_STEP``."""

    def __init__(self, task: int) -> None:
        self.task, self.steps = task, 0

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self.steps = 0
        return np.zeros(1), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        if self.task == KILL_TASK and self.steps == KILL_AT_STEP:
            os.kill(os.getpid(), signal.SIGKILL)
        return np.full(1, self.steps), 0.0, self.steps >= 4, False, {"success": self.steps >= 4}


class OnePolicy:
    name, batched_planning, has_planner = "one", False, False

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        return EpisodeMemory(key=key, seed=seed)

    def dummy_action(self) -> int:
        return 0

    def plan(self, items: Sequence[ActItem]) -> None:
        del items

    def needs_plan(self, item: ActItem) -> bool:
        return False

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        return [[1] for _ in items]


def _gone(pid: int) -> bool:
    """The process no longer exists (reaped), or is a zombie nobody waits for."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().split(")")[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_killed_worker_fails_its_slots_episodes_with_the_cause_and_the_others_finish() -> None:
    # 4 tasks x 2 trials on 4 slots, 2 spawned workers: slots 1 and 3 (tasks 1 and 3) live in worker 1
    sched = EpisodeScheduler(KillerEnv, OnePolicy(), [EpisodeKey(t, r) for t in range(4) for r in range(2)],
                             num_parallel=4, num_steps_wait=0, max_steps=10, seed=0, env_workers=2,
                             worker_start="spawn")
    results = {}
    pids: list[int] = []
    for r in sched.run():
        pids = pids or sched._pool.pids
        results[r.key.id] = r
    assert len(results) == 8 and len(pids) == 2
    for task in (0, 2):  # worker 0: untouched
        for trial in range(2):
            r = results[f"task{task}_trial{trial}"]
            assert r.error is None and r.success is True and r.steps == 4
    cause = f"environment worker 1 (pid {pids[1]}) was killed by signal SIGKILL"
    for task in (1, 3):  # worker 1: the running episodes and the later trials of its slots fail with the cause
        for trial in range(2):
            assert results[f"task{task}_trial{trial}"].error == cause
    assert results["task1_trial0"].steps == KILL_AT_STEP - 1  # the step that killed it is not counted
    assert sched._pool is None and all(_gone(pid) for pid in pids)  # no worker process is left
