"""LeRobot- and openpi-keyed policies run on Push-T and on LIBERO without a wrapper (``--policy-keys``,
``episodes.keys``): each policy class below is written as LeRobot's / openpi's policies are (LeRobot: a
``config_class`` and ``name``, ``predict_action_chunk`` / ``select_action`` on ``observation.image(s)``,
``observation.state``, ``task``, actions in the environment's units; openpi: ``infer`` on ``observation/image``,
``observation/wrist_image``, ``observation/state``, ``prompt``, ``{"actions": (H, A)}``) and records what it was
given. On LIBERO the openpi-keyed policy's observations are compared with openpi's ``examples/libero/main.py``
loop redone here by hand on LIBERO itself (reset, ``set_init_state(initial_states[i])``, ``LIBERO_DUMMY_ACTION``
``num_steps_wait`` times, the 180-degree turn, PIL's bilinear resize, robosuite's axis-angle). Real gym-pusht and
real LIBERO scenes (rendered headless), nothing mocked."""

from __future__ import annotations

import csv
import json
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lmmbench.cli.main import main

LEROBOT_POLICY = '''
import dataclasses
import pickle

import torch

RECORD = {record!r}


@dataclasses.dataclass
class TargetConfig:
    n_action_steps: int = 2
    target: tuple = {target!r}


class TargetPolicy(torch.nn.Module):
    """As LeRobot's PreTrainedPolicy: config_class and name, built from its own config."""

    config_class = TargetConfig
    name = "target"

    def __init__(self, config):
        super().__init__()
        assert isinstance(config, TargetConfig), type(config)
        self.config = config
        self.seen = []

    def reset(self):
        pass

    def predict_action_chunk(self, batch):
        self.seen.append({{k: (tuple(v.shape), str(v.dtype), float(v.min()), float(v.max()), v.numpy().copy())
                          if hasattr(v, "shape") else list(v) for k, v in batch.items()}})
        with open(RECORD, "wb") as fh:
            pickle.dump(self.seen, fh)
        b = len(batch["task"])
        return torch.tensor(self.config.target, dtype=torch.float32).expand(b, 4, len(self.config.target))

    def select_action(self, batch):
        return self.predict_action_chunk(batch)[:, 0]
'''

OPENPI_POLICY = '''
import pickle

import numpy as np

RECORD = {record!r}


class InferPolicy:
    """As openpi's policies: infer(obs) on one unbatched observation, {{"actions": (H, A)}} out."""

    def __init__(self):
        self.seen = []

    def infer(self, obs):
        self.seen.append({{k: np.array(v) if not isinstance(v, str) else v for k, v in obs.items()}})
        with open(RECORD, "wb") as fh:
            pickle.dump(self.seen, fh)
        return {{"actions": np.tile(np.asarray({target!r}, dtype=np.float32), (10, 1))}}
'''


def _write(tmp_path: Path, name: str, template: str, target: tuple[float, ...]) -> tuple[str, Path]:
    record = tmp_path / f"{name}.pkl"
    (tmp_path / f"{name}.py").write_text(template.format(record=str(record), target=target), encoding="utf-8")
    return str(tmp_path / f"{name}.py"), record


def _run(argv: list[str], out: Path) -> tuple[dict[str, Any], list[dict[str, str]]]:
    assert main(["run", "episodic-eval", *argv, "--warmup", "0", "--no-progress", "--out-dir", str(out)]) == 0
    spec = out / "episodic-eval"
    with (spec / "episodic-eval_results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return json.loads((spec / "run.json").read_text())["run"]["episodic_eval"], rows


def test_lerobot_keyed_policy_on_push_t_gets_lerobots_keys_and_moves_in_pixels(tmp_path: Path) -> None:
    """Detected from its class (config_class, name): observation.image (B, 3, 224, 224) in [0, 1],
    observation.state in pixels, task; its action (256, 256) is the agent's target in pixels, so the agent
    goes to the board's middle (as a normalized action it would be clipped to the corner)."""
    path, record = _write(tmp_path, "lr_pusht", LEROBOT_POLICY, (256.0, 256.0))
    run, rows = _run(["--env", "pusht", "--policy", f"{path}:TargetPolicy", "--num-tasks", "2",
                      "--num-trials-per-task", "1", "--num-steps-wait", "0", "--max-steps", "30"], tmp_path / "o")
    assert run["policy_keys"] == "lerobot" and run["policy_shape"]["mode"] == "predict_action_chunk"
    assert run["policy_shape"]["actions_executed_per_chunk"] == 2  # its config's n_action_steps
    seen = pickle.loads(record.read_bytes())
    first, last = seen[1], seen[-1]  # seen[0]: the probe step
    assert sorted(first) == ["observation.image", "observation.state", "task"]
    shape, dtype, low, high, _ = first["observation.image"]
    assert shape == (2, 3, 224, 224) and dtype == "torch.float32" and 0.0 <= low < high <= 1.0
    assert first["observation.state"][0] == (2, 2) and first["observation.state"][3] > 1.0  # pixels, not 0..1
    assert len(first["task"]) == 2 and all(isinstance(t, str) and t for t in first["task"])
    start, end = first["observation.state"][4], last["observation.state"][4]
    assert (np.linalg.norm(end - 256.0, axis=1) < np.linalg.norm(start - 256.0, axis=1)).all()
    assert all(r["status"] == "ok" for r in rows)


def test_openpi_keyed_policy_on_push_t_gets_openpis_keys_and_replans_every_5(tmp_path: Path) -> None:
    path, record = _write(tmp_path, "op_pusht", OPENPI_POLICY, (256.0, 256.0))
    run, rows = _run(["--env", "pusht", "--policy", f"{path}:InferPolicy", "--policy-keys", "openpi", "--num-tasks",
                      "1", "--num-trials-per-task", "1", "--num-steps-wait", "0", "--max-steps", "12"], tmp_path / "o")
    assert run["policy_keys"] == "openpi" and run["replan_steps"] == 5  # openpi's example's default
    seen = pickle.loads(record.read_bytes())[1:]
    assert sorted(seen[0]) == ["observation/image", "observation/state", "prompt"]
    assert seen[0]["observation/image"].shape == (224, 224, 3) and seen[0]["observation/image"].dtype == np.uint8
    assert seen[0]["observation/state"].max() > 1.0 and isinstance(seen[0]["prompt"], str)
    (row,) = rows
    assert int(row["action_calls"]) == math.ceil(int(row["steps"]) / 5) == len(seen)
    assert np.linalg.norm(seen[-1]["observation/state"] - 256.0) < np.linalg.norm(seen[0]["observation/state"] - 256.0)



def _openpi_loop_by_hand(trials: int, num_steps_wait: int, seed: int) -> list[dict[str, Any]]:
    """openpi's examples/libero/main.py for task 0 of libero_object up to its first infer call of each trial,
    redone on LIBERO itself: the element it would send."""
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv
    from PIL import Image

    suite = benchmark.get_benchmark_dict()["libero_object"]()
    task = suite.get_task(0)
    states = suite.get_task_init_states(0)
    bddl = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
    env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=256, camera_widths=256)
    env.seed(seed)
    out = []
    for i in range(trials):
        env.reset()
        obs = env.set_init_state(states[i])
        for _ in range(num_steps_wait):
            obs, _, _, _ = env.step([0.0] * 6 + [-1.0])
        quat = np.asarray(obs["robot0_eef_quat"], dtype=np.float64)
        den = math.sqrt(1.0 - min(1.0, quat[3]) ** 2)
        axis = np.zeros(3) if math.isclose(den, 0.0) else quat[:3] * 2.0 * math.acos(min(1.0, quat[3])) / den
        images = {k: np.asarray(Image.fromarray(np.ascontiguousarray(obs[cam][::-1, ::-1])).resize(
            (224, 224), Image.BILINEAR)) for k, cam in (("observation/image", "agentview_image"),
                                                       ("observation/wrist_image", "robot0_eye_in_hand_image"))}
        out.append({**images, "observation/state": np.concatenate([obs["robot0_eef_pos"], axis,
                                                                    obs["robot0_gripper_qpos"]]),
                    "prompt": task.language})
    env.close()
    return out


def test_openpi_keyed_policy_on_libero_sees_what_openpis_evaluation_sends(libero: Any, tmp_path: Path) -> None:
    """The elements the policy gets at its first call of trials 0 and 1 are those openpi's loop builds (trial i
    from initial state i, the dummy action, the images and the state); replan every 5 steps; videos written."""
    path, record = _write(tmp_path, "op_libero", OPENPI_POLICY, (0.0,) * 6 + (-1.0,))
    argv = ["--task-suite-name", "libero_object", "--policy", f"{path}:InferPolicy", "--policy-keys", "openpi",
            "--num-tasks", "1", "--num-trials-per-task", "2", "--num-steps-wait", "3", "--max-steps", "6",
            "--video-out-path", str(tmp_path / "videos")]  # fmt: skip
    run, rows = _run(argv, tmp_path / "o")
    assert run["env"] == "libero-object" and run["replan_steps"] == 5 and run["env_seed"] == 7
    seen = pickle.loads(record.read_bytes())[1:]  # [0]: the probe step
    assert len(seen) == 4  # two calls per trial: steps 0 and 5
    expected = _openpi_loop_by_hand(2, 3, 7)
    for got, want in zip((seen[0], seen[2]), expected, strict=True):
        assert sorted(got) == sorted(want) and got["prompt"] == want["prompt"]
        assert np.allclose(got["observation/state"], want["observation/state"], atol=1e-5)
        for cam in ("observation/image", "observation/wrist_image"):
            assert got[cam].shape == (224, 224, 3) and got[cam].dtype == np.uint8
            assert np.abs(got[cam].astype(int) - want[cam].astype(int)).mean() < 1.0
    assert not np.allclose(seen[0]["observation/state"], seen[2]["observation/state"])  # two initial states
    assert sorted(p.name for p in (tmp_path / "videos").glob("*.mp4")) == ["task0_trial0.mp4", "task0_trial1.mp4"]
    assert all(r["status"] == "ok" and int(r["action_calls"]) == 2 for r in rows)


def test_lerobot_keyed_policy_on_libero_gets_lerobots_keys(libero: Any, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """predict_action_chunk with LeRobot's LIBERO keys (observation.images.image / image2, observation.state, task),
    built from its own config, the cameras at --resize-size; more trials than LIBERO's 50 initial states are
    refused, naming the count."""
    path, record = _write(tmp_path, "lr_libero", LEROBOT_POLICY, (0.0,) * 6 + (-1.0,))
    run, rows = _run(["--env", "libero-object", "--policy", f"{path}:TargetPolicy", "--num-tasks", "1",
                      "--num-trials-per-task", "1", "--num-steps-wait", "3", "--max-steps", "2",
                      "--resize-size", "128"], tmp_path / "o")
    assert run["policy_keys"] == "lerobot" and run["resize_size"] == 128
    seen = pickle.loads(record.read_bytes())
    got = seen[-1]
    assert sorted(got) == ["observation.images.image", "observation.images.image2", "observation.state", "task"]
    for cam in ("observation.images.image", "observation.images.image2"):
        shape, dtype, low, high, _ = got[cam]
        assert shape == (1, 3, 128, 128) and dtype == "torch.float32" and 0.0 <= low < high <= 1.0  # --resize-size
    from libero.libero import benchmark

    assert got["observation.state"][0] == (1, 8)
    assert got["task"] == [benchmark.get_benchmark_dict()["libero_object"]().get_task(0).language]
    assert all(r["status"] == "ok" for r in rows)
    assert main(["run", "episodic-eval", "--env", "libero-object", "--policy", f"{path}:TargetPolicy",
                 "--num-tasks", "1", "--num-trials-per-task", "51", "--out-dir", str(tmp_path / "x")]) == 2
    assert "has 50 initial states per task" in capsys.readouterr().err
