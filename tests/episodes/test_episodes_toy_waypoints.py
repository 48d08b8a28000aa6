"""toy-waypoints and the toy policies: exact dynamics, planning, and batched == serial (real torch
forwards on CPU), with and without the prefix KV cache."""

from __future__ import annotations

import numpy as np

from lmmbench.episodes import ActItem, EpisodeKey, EpisodeScheduler
from lmmbench.episodes.envs.toy_waypoints import GRID, ToyWaypointsEnv, task_layout


def test_actions_round_to_king_moves_and_near_boundaries_are_counted() -> None:
    env = ToyWaypointsEnv(0)
    obs, info = env.reset(seed=3)
    start = obs["position"].copy()
    obs, *_ , info = env.step([0.4999, -0.5001])
    assert list(obs["position"]) == [start[0], max(0, start[1] - 1)]
    assert info["stat_near_rounding_boundary"] == 0
    env.step([0.5 + 5e-6, 3.7])  # first component within 1e-5 of the x.5 boundary; second clipped to +1
    assert env.near_boundary == 1


def test_visiting_every_waypoint_is_a_success() -> None:
    env = ToyWaypointsEnv(2)
    obs, info = env.reset(seed=11)
    assert not info["success"] and obs["image"][1].sum() == 3
    total, done, info = 0.0, False, {}
    for wx, wy in task_layout(2):
        while not done and (obs["position"][0], obs["position"][1]) != (wx, wy):
            move = np.sign(np.array([wx, wy]) - obs["position"])
            obs, reward, done, _, info = env.step(move.astype(float))
            total += reward
    assert done and info["success"] and total == 3.0
    assert obs["image"][2].sum() == 3 and obs["image"][1].sum() == 0


def test_planner_proposes_nearest_unvisited_waypoints_from_the_image() -> None:
    from lmmbench.episodes.policies.toy import plan_waypoints

    image = np.zeros((3, GRID, GRID), dtype=np.float32)
    for x, y in [(10, 10), (2, 3), (14, 1)]:
        image[1, y, x] = 1.0
    image[2, 5, 5] = 1.0  # visited: never proposed
    assert plan_waypoints(image, np.array([0, 0]), ahead=3) == [(2, 3), (10, 10), (14, 1)]
    assert plan_waypoints(image, np.array([15, 0]), ahead=2) == [(14, 1), (10, 10)]


def _evaluate(policy: object, num_parallel: int) -> dict[EpisodeKey, object]:
    episodes = [EpisodeKey(t, r) for t in range(8) for r in range(2)]
    sched = EpisodeScheduler(ToyWaypointsEnv, policy, episodes, num_parallel=num_parallel,  # type: ignore[arg-type]
                             num_steps_wait=3, max_steps=24, seed=0)
    return {r.key: r for r in sched.run()}


def test_batched_equals_serial_prefix_cache_policy() -> None:
    """(The plain toy policy's pair of runs is the CLI test in test_episodic_eval_spec.py.)"""
    from lmmbench.episodes.policies.toy import ToyWaypointPolicy

    prefix_cache = True
    serial = _evaluate(ToyWaypointPolicy(prefix_cache=prefix_cache), 1)
    batched = _evaluate(ToyWaypointPolicy(prefix_cache=prefix_cache), 8)
    largest = 0.0
    for key, s in serial.items():
        b = batched[key]
        assert (s.success, s.steps) == (b.success, b.steps), key  # type: ignore[attr-defined]
        assert len(s.trace) == len(b.trace)  # type: ignore[attr-defined]
        for x, y in zip(s.trace, b.trace, strict=True):  # type: ignore[attr-defined]
            largest = max(largest, float(np.abs(x - y).max()))
    assert largest <= 1e-5
    rate = sum(bool(r.success) for r in serial.values()) / len(serial)  # type: ignore[attr-defined]
    assert 0.0 < rate < 1.0
    sizes = [n for r in batched.values() for n in r.action_batch_sizes]  # type: ignore[attr-defined]
    assert max(sizes) == 8 and all(n == 1 for r in serial.values() for n in r.action_batch_sizes)  # type: ignore[attr-defined]


def test_prefix_cache_rows_belong_to_their_episode() -> None:
    """The batch order does not change an episode's actions, and its task K/V is built once."""
    from lmmbench.episodes.policies.toy import ToyWaypointPolicy

    policy = ToyWaypointPolicy(prefix_cache=True)

    def items(order: list[int]) -> list[ActItem]:
        out = []
        for task in order:
            env = ToyWaypointsEnv(task)
            obs, info = env.reset(seed=100 + task)
            item = ActItem(policy.new_episode(EpisodeKey(task, 0), 100 + task), obs, info)
            policy.plan([item])
            out.append(item)
        return out

    forward, backward = items([0, 1, 2]), items([2, 1, 0])
    for _ in range(2):
        policy.act(forward)
        policy.act(backward)
    for i, task in enumerate([0, 1, 2]):
        a, b = forward[i].memory, backward[2 - i].memory
        assert a.key.task == b.key.task == task
        assert a.data["stat_task_kv_builds"] == 1
        for x, y in zip(a.trace, b.trace, strict=True):
            assert float(np.abs(x - y).max()) <= 1e-5
    assert float(np.abs(forward[0].memory.trace[0] - forward[1].memory.trace[0]).max()) > 1e-3
