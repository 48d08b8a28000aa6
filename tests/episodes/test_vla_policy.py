"""The VLA-shaped policy as the episodic design runs it (models.vla, models.vla_planner): π0's parameter count
on the meta device, a fresh prefix from the current observation in every action-expert call, one prefix + one
denoiser forward per tick (forward hooks), k waypoints -> k calls whose chunks last their durations, the planner
at batch 1 per slot, batched == serial, and the Push-T physics environment (gym-pusht: pymunk, headless pygame)
driven by it. Real torch forwards on CPU."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lmmbench.episodes import ActItem, EpisodeKey, EpisodeScheduler
from lmmbench.episodes.policies.vla import VlaPolicy, instruction_tokens
from lmmbench.models.vla import PI0, PI0_TINY, count_vla_parameters


def test_pi0_shape_has_the_published_parameter_count_on_the_meta_device() -> None:
    """π0 is published as 3.3 B parameters (PaliGemma 3B + a 300M action expert); within 5 %."""
    total = count_vla_parameters(PI0)
    assert abs(total / 3.3e9 - 1) < 0.05, total
    with torch.device("meta"):
        from lmmbench.models.vla import VlaModel

        model = VlaModel(PI0)
    expert = sum(p.numel() for p in model.action_expert.parameters())
    vision = sum(p.numel() for p in model.prefix.vision.parameters())
    assert abs(expert / 0.3e9 - 1) < 0.1, expert  # Gemma 300M-shaped
    assert abs(vision / 0.4e9 - 1) < 0.05, vision  # SigLIP So400m/14
    assert model.prefix.embed.weight.shape == (257_152, 2048) and len(model.prefix.layers) == 18
    assert count_vla_parameters(PI0.with_layers(1)) < total / 4  # every tower cut; the 527 M embedding stays


def _observation(task: int, rng: np.random.Generator, size: int = 224) -> dict[str, Any]:
    words = ["push", "the", "grey", "T", "block", "onto", "the", "target", "now", "please"]
    return {"image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8), "state": rng.random(2),
            "instruction": " ".join(words[: 2 + 3 * task])}


class _PushTLite:
    """A stand-in environment with Push-T's observation layout and no physics (these tests count forwards and
    compare actions; the physics is tested below with gym-pusht itself); named so. ``moving=False`` freezes
    the observation after reset; ``moving=True`` changes it after ``frozen_steps`` steps."""

    def __init__(self, task: int, moving: bool = True, frozen_steps: int = 0) -> None:
        self.task, self.t, self.moving, self.frozen_steps, self.seed = task, 0, moving, frozen_steps, 0

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self.t, self.seed = 0, seed or 0
        return _observation(self.task % 3, np.random.default_rng(self.seed), 112), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        frame = self.t if self.moving and self.t > self.frozen_steps else 0
        return _observation(self.task % 3, np.random.default_rng(self.seed + 1000 * frame), 112), 0.0, False, False, {}


def _hooks(policy: VlaPolicy) -> dict[str, list[Any]]:
    """Forward hooks on the prefix pass, the denoiser, one denoiser layer and the planner's prompt pass."""
    seen: dict[str, list[Any]] = {"prefix": [], "expert": [], "layer": [], "planner": []}
    model = policy.model
    model.prefix.register_forward_hook(lambda m, args, out: seen["prefix"].append(out))
    model.action_expert.register_forward_hook(lambda m, args, out: seen["expert"].append(out.shape[0]))
    model.action_expert.layers[0].mlp.register_forward_hook(lambda m, args, out: seen["layer"].append(out.shape[0]))
    policy.planner.register_forward_hook(lambda m, args, out: seen["planner"].append(args[0].shape[0]))
    return seen


def test_a_moving_observation_gets_a_fresh_prefix_and_other_actions_than_a_frozen_one() -> None:
    """The same episode (same seed, same weights) in two environments that agree until the first executed
    action, then one freezes and one moves: the first action-expert call is identical, every later call's
    prefix is computed again from the current image and differs, and so do the actions. (A prefix kept from
    the episode's first call would give identical actions: what the design's "each AE call uses the newest
    image" rules out.)"""
    torch.set_num_threads(1)
    runs = {}
    for moving in (False, True, False):
        policy = VlaPolicy("pi0-tiny")
        seen = _hooks(policy)
        sched = EpisodeScheduler(lambda task, m=moving: _PushTLite(task, m, frozen_steps=2), policy,
                                 [EpisodeKey(0, 0)], num_parallel=1, num_steps_wait=2, max_steps=40, seed=0)
        (result,) = list(sched.run())
        runs.setdefault(moving, []).append((np.stack(result.trace), seen["prefix"]))
    (frozen, frozen_prefix), (frozen2, _) = runs[False]
    moving, moving_prefix = runs[True][0]
    assert len(frozen) >= 2 and np.array_equal(frozen, frozen2)  # 40 steps > one 32-step chunk; deterministic
    assert len(frozen_prefix) == len(frozen)  # one prefix pass per action-expert call, none reused
    assert np.abs(moving[0] - frozen[0]).max() == 0.0  # same observation at the first call: same actions
    assert not torch.equal(moving_prefix[1].keys[0], frozen_prefix[1].keys[0])  # the newest image went in
    assert np.abs(moving[1] - frozen[1]).max() > 1e-3


def test_every_camera_of_the_observation_goes_into_the_prefix() -> None:
    """An observation with a wrist camera beside the main one: both images' tokens are in the prefix, and
    changing only the wrist image changes the actions."""
    torch.set_num_threads(1)
    policy = VlaPolicy("pi0-tiny")
    seen = _hooks(policy)
    obs = _observation(1, np.random.default_rng(0), 112)
    obs["wrist_image"] = np.random.default_rng(1).integers(0, 256, (96, 96, 3), dtype=np.uint8)
    other = {**obs, "wrist_image": np.random.default_rng(2).integers(0, 256, (96, 96, 3), dtype=np.uint8)}
    chunks = []
    for o in (obs, other):
        item = ActItem(policy.new_episode(EpisodeKey(0, 0), 5), o, {})
        policy.plan([item])
        policy.act([item])
        chunks.append(item.memory.trace[0])
    assert policy.camera_keys(obs) == ("image", "wrist_image")
    assert seen["prefix"][0].mask.shape[1] == policy.cfg.prefix_tokens(cameras=2)  # 2 x 64 image tokens + 67
    assert np.abs(chunks[0] - chunks[1]).max() > 1e-4


def test_one_prefix_and_one_denoiser_forward_per_tick_for_every_need_ae_slot() -> None:
    torch.set_num_threads(1)
    policy = VlaPolicy("pi0-tiny")
    seen = _hooks(policy)
    act_batches: list[int] = []
    act = policy.act
    policy.act = lambda items: (act_batches.append(len(items)), act(items))[1]  # type: ignore[method-assign]
    keys = [EpisodeKey(t, 0) for t in range(4)]
    sched = EpisodeScheduler(_PushTLite, policy, keys, num_parallel=4, num_steps_wait=1, max_steps=20, seed=0)
    results = list(sched.run())
    assert len(results) == 4 and act_batches and max(act_batches) == 4
    assert [c.mask.shape[0] for c in seen["prefix"]] == act_batches  # one prefix pass per act call, whole batch
    assert seen["expert"] == act_batches  # one denoiser forward per act call (per tick), the whole batch in it
    assert seen["layer"] == [b for b in act_batches for _ in range(PI0.denoise_steps)]  # 10 steps, never per slot
    assert sum(r.action_calls for r in results) == sum(act_batches)
    assert sched.totals.action_batch_histogram() == {str(b): act_batches.count(b) for b in sorted(set(act_batches))}


def test_k_waypoints_make_k_action_calls_whose_chunks_last_their_durations() -> None:
    """Pair i runs from waypoint i-1 (the current proprioception for the first) to waypoint i; its chunk
    executes the pair's duration in steps; after the k-th pair the slot replans."""
    torch.set_num_threads(1)
    policy = VlaPolicy("pi0-tiny")
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    def pair_inputs(module: Any, args: tuple[Any, ...]) -> None:  # the prefix's states argument: (start, end)
        starts.append(args[3][0][0].numpy().copy())
        ends.append(args[3][1][0].numpy().copy())

    policy.model.prefix.register_forward_pre_hook(pair_inputs)
    env = _PushTLite(1)
    obs, _ = env.reset(seed=3)
    item = ActItem(policy.new_episode(EpisodeKey(0, 0), 3), obs, {})
    policy.plan([item])
    waypoints = item.memory.data["waypoints"]
    assert 1 <= len(waypoints) <= 7 and len(item.memory.data["plan_tokens"]) == policy.planner_cfg.generated_tokens
    lengths = []
    while not policy.needs_plan(item):
        (chunk,) = policy.act([item])
        lengths.append(len(chunk))
        for action in chunk:
            item.observation, *_ = env.step(action)
    assert lengths == [min(w.steps, 32) for w in waypoints]  # one call per waypoint, each its duration's steps
    assert np.allclose(starts[0][:2], obs["state"]) and np.allclose(ends[0], waypoints[0].state)
    for i in range(1, len(waypoints)):
        assert np.array_equal(starts[i], waypoints[i - 1].state) and np.array_equal(ends[i], waypoints[i].state)


def test_the_planner_runs_at_batch_1_per_need_vlm_slot_and_batched_only_when_asked() -> None:
    """Default: one planner call per NEED_VLM slot, batch 1, one after another (the design). With
    batched_planning the NEED_VLM slots of a tick share one left-padded call and decode the same waypoints."""
    torch.set_num_threads(1)
    plans = {}
    for batched in (False, True):
        policy = VlaPolicy("pi0-tiny", batched_planning=batched)
        seen = _hooks(policy)
        sched = EpisodeScheduler(_PushTLite, policy, [EpisodeKey(t, 0) for t in range(3)], num_parallel=3,
                                 num_steps_wait=1, max_steps=6, seed=0)
        results = list(sched.run())
        replans = sum(r.planning_calls for r in results)
        if batched:
            assert max(seen["planner"]) == 3 and len(seen["planner"]) < replans
        else:
            assert seen["planner"] == [1] * replans and replans >= 3
        plans[batched] = {r.key: r.trace[0] for r in results}
    for key, first in plans[False].items():  # the first plan of each episode: the same waypoints either way
        assert np.abs(plans[True][key] - first).max() <= 1e-5 * np.abs(first).max()


def test_a_different_planner_seed_gives_other_waypoints_and_other_action_expert_inputs() -> None:
    torch.set_num_threads(1)
    obs = _observation(0, np.random.default_rng(4), 112)
    decoded = []
    for seed in (1, 2):
        policy = VlaPolicy("pi0-tiny", planner_seed=seed)
        ends: list[np.ndarray] = []
        policy.model.prefix.register_forward_pre_hook(lambda m, args, e=ends: e.append(args[3][1].numpy().copy())
                                                      and None)
        item = ActItem(policy.new_episode(EpisodeKey(0, 0), 7), obs, {})
        policy.plan([item])
        policy.act([item])
        decoded.append((item.memory.data["plan_tokens"], ends[0]))
    assert decoded[0][0] != decoded[1][0]
    assert not np.array_equal(decoded[0][1], decoded[1][1])  # the pair's end proprioception came from the plan


def test_batched_equals_serial_within_1e5_on_the_waypoint_workload() -> None:
    """Four episodes whose instructions have 2, 5 and 8 tokens (padded and masked in a batch), chunks of
    different lengths so slots fall out of step: every raw chunk agrees within 1e-5 relative."""
    torch.set_num_threads(1)
    assert [instruction_tokens(_observation(t, np.random.default_rng(0))["instruction"], PI0_TINY)[1]
            for t in range(3)] == [2, 5, 8]
    traces = {}
    sizes = {}
    for n in (4, 1):
        policy = VlaPolicy("pi0-tiny")
        sched = EpisodeScheduler(_PushTLite, policy, [EpisodeKey(t, 0) for t in range(4)], num_parallel=n,
                                 num_steps_wait=1, max_steps=20, seed=0)
        traces[n] = {r.key: np.stack(r.trace) for r in sched.run()}
        sizes[n] = sched.totals.action_batch_sizes
    assert set(sizes[1]) == {1} and max(sizes[4]) > 1
    for key, t in traces[1].items():
        assert traces[4][key].shape == t.shape and t.shape[1:] == (32, 32)
        assert np.abs(traces[4][key] - t).max() <= 1e-5 * np.abs(t).max()


def test_pusht_physics_runs_episodes_with_the_policy_headless(tmp_path: Path) -> None:
    """gym-pusht's real physics and rendering (224 px frames), 4 episodes on 4 slots, batched == serial."""
    from lmmbench.cli.main import main

    argv = ["run", "episodic-eval", "--env", "pusht", "--policy", "pi0-tiny", "--num-tasks", "2",
            "--num-trials-per-task", "2", "--num-parallel", "4", "--max-steps", "6", "--threads", "1",
            "--out-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    rows = list(csv.DictReader((tmp_path / "episodic-eval" / "episodic-eval_results.csv").open()))
    assert len(rows) == 4 and all(r["success"] in ("0", "1") for r in rows)  # gym-pusht's is_success, never empty
    assert all(int(r["steps"]) == 6 for r in rows)
    from lmmbench.episodes.envs.pusht import PushTEnv

    env = PushTEnv(1)
    obs, _ = env.reset(seed=3)
    assert obs["image"].shape == (224, 224, 3) and obs["image"].std() > 0  # a rendered scene
    before = obs["state"].copy()
    for _ in range(5):
        obs, *_ = env.step(np.ones(32))  # normalized +1 -> the box's top corner (512, 512)
    assert (obs["state"] > before).all()  # the physics moved the agent toward it
    env.close()
    keys = [EpisodeKey(t, k) for t in range(2) for k in range(2)]
    traces = {}
    for n in (4, 1):
        policy = VlaPolicy("pi0-tiny")
        sched = EpisodeScheduler(PushTEnv, policy, keys, num_parallel=n, num_steps_wait=1, max_steps=4, seed=0)
        traces[n] = {r.key: np.stack(r.trace) for r in sched.run()}
    for key, t in traces[1].items():
        assert np.abs(traces[4][key] - t).max() <= 1e-5 * np.abs(t).max()
