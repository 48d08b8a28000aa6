"""The VLA-shaped policy (models.vla): π0's parameter count on the meta device, batched == serial over
prefixes of different lengths, one action-expert forward per tick (counted with a forward hook), and the
Push-T physics environment (gym-pusht: pymunk, headless pygame) driven by it. Real torch forwards on CPU."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lmmbench.episodes import ActItem, EpisodeKey, EpisodeScheduler
from lmmbench.episodes.vla_policy import VlaPolicy, instruction_tokens
from lmmbench.models.vla import PI0, count_vla_parameters


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
            "previous_state": rng.random(2), "instruction": " ".join(words[: 2 + 3 * task]), "time_s": 0.1 * task}


def _run(policy: VlaPolicy, obs: list[dict[str, Any]], batched: bool) -> list[np.ndarray]:
    items = [ActItem(policy.new_episode(EpisodeKey(i, 0), 100 + i), o, {}) for i, o in enumerate(obs)]
    groups = [items] if batched else [[it] for it in items]
    for g in groups:
        policy.plan(g)
    for _ in range(2):  # two chunks: the cache is only read, the noise generators advance per episode
        for g in groups:
            policy.act(g)
    return [np.stack(it.memory.trace) for it in items]


def test_batched_equals_serial_over_prefixes_of_different_lengths() -> None:
    """Three episodes whose instructions have 2, 5 and 8 tokens: padded and masked in the batch, alone
    in the serial run; the normalized action chunks agree within 1e-5 relative."""
    torch.set_num_threads(1)
    policy = VlaPolicy("pi0-tiny")
    rng = np.random.default_rng(0)
    obs = [_observation(t, rng) for t in range(3)]
    lengths = [instruction_tokens(o["instruction"], policy.cfg)[1] for o in obs]
    assert lengths == [2, 5, 8]
    batched, serial = _run(policy, obs, True), _run(policy, obs, False)
    for b, s in zip(batched, serial, strict=True):
        assert b.shape == (2, 32, 32)
        assert np.abs(b - s).max() <= 1e-5 * np.abs(s).max()
        assert not np.allclose(b[0], b[1])  # a second chunk is new noise, not a copy
    assert not np.allclose(batched[0], batched[1], atol=1e-3)  # episodes differ (noise and prefix)


class _PushTLite:
    """A stand-in environment with Push-T's observation layout and no physics (the scheduler test's
    only concern is how many forwards run per tick); named so."""

    def __init__(self, task: int) -> None:
        self.task, self.t = task, 0

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self.t = 0
        return _observation(self.task % 3, np.random.default_rng(seed), 112), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return _observation(self.task % 3, np.random.default_rng(self.t), 112), 0.0, False, False, {}


def test_one_action_expert_forward_per_tick_for_every_slot_counted_with_a_hook() -> None:
    torch.set_num_threads(1)
    policy = VlaPolicy("pi0-tiny")
    expert_batches: list[int] = []
    layer_calls: list[int] = []
    policy.model.action_expert.register_forward_hook(lambda m, args, out: expert_batches.append(out.shape[0]))
    policy.model.action_expert.layers[0].mlp.register_forward_hook(
        lambda m, args, out: layer_calls.append(out.shape[0]))
    act_batches: list[int] = []
    act = policy.act
    policy.act = lambda items: (act_batches.append(len(items)), act(items))[1]  # type: ignore[method-assign]
    keys = [EpisodeKey(t, 0) for t in range(4)]
    sched = EpisodeScheduler(_PushTLite, policy, keys, num_parallel=4, num_steps_wait=1, max_steps=5, seed=0)
    results = list(sched.run())
    assert len(results) == 4 and act_batches and max(act_batches) == 4
    assert expert_batches == act_batches  # one expert forward per act call (per tick), the whole batch in it
    assert layer_calls == [b for b in act_batches for _ in range(PI0.denoise_steps)]  # 10 steps, never per slot
    assert sum(r.action_calls for r in results) == sum(act_batches)


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
    from lmmbench.episodes.pusht import PushTEnv

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
