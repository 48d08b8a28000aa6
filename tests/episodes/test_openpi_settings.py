"""openpi's LIBERO evaluation settings (``examples/libero/main.py`` of Physical-Intelligence/openpi, read at commit
15a9616a) by openpi's names and meanings: every task of a suite by default, openpi's max steps per suite, the
suite by ``task_suite_name``, openpi's warm-up action, trial i from initial state i, ``replan_steps``, and
``resize_size`` as openpi-client's ``image_tools.resize_with_pad``. The expected values are openpi's, copied from
its source as read (not from lmmbench's output); the environments here are real (toy-waypoints, Push-T), the
LIBERO runs are in test_policy_keys.py."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lmmbench.cli.main import main
from lmmbench.core.errors import UserError

#: examples/libero/main.py: the max_steps of each task_suite_name, and its n_tasks (LIBERO's benchmark)
OPENPI_MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520,
                    "libero_90": 400}
OPENPI_DUMMY_ACTION = [0.0] * 6 + [-1.0]  # LIBERO_DUMMY_ACTION
OPENPI_ARGS = {"resize_size": 224, "replan_steps": 5, "num_steps_wait": 10, "num_trials_per_task": 50, "seed": 7}


def _options(**kwargs: Any) -> Any:
    from lmmbench.specs.episodic_eval import EpisodicEvalOptions

    return EpisodicEvalOptions(**kwargs)


@pytest.mark.parametrize("openpi_name", sorted(OPENPI_MAX_STEPS))
def test_task_suite_name_picks_the_suite_with_every_task_and_openpis_max_steps(openpi_name: str) -> None:
    from lmmbench.episodes.envs.libero_suites import LIBERO_SUITES
    from lmmbench.specs.episodic_build import suite_and_env

    suite, num_tasks, kwargs, info = suite_and_env(_options(task_suite_name=openpi_name))
    assert LIBERO_SUITES[suite.name][0] == openpi_name
    assert num_tasks == (90 if openpi_name == "libero_90" else 10)  # every task of the suite, as openpi's loop
    assert suite.default_max_steps == OPENPI_MAX_STEPS[openpi_name]
    assert list(suite.warmup_action) == OPENPI_DUMMY_ACTION and suite.reset_by_trial
    assert kwargs == {"env_seed": OPENPI_ARGS["seed"]} and info["resize_size"] == OPENPI_ARGS["resize_size"]


def test_defaults_of_the_other_openpi_settings_are_openpis() -> None:
    from lmmbench.episodes.openpi_settings import OPENPI_REPLAN_STEPS

    opts = _options()
    assert (opts.num_steps_wait, opts.num_trials_per_task, OPENPI_REPLAN_STEPS) == (
        OPENPI_ARGS["num_steps_wait"], OPENPI_ARGS["num_trials_per_task"], OPENPI_ARGS["replan_steps"])


def test_suites_without_a_task_count_keep_eight_tasks_and_a_conflicting_env_is_refused() -> None:
    from lmmbench.specs.episodic_build import suite_and_env

    assert suite_and_env(_options(env="toy-waypoints"))[1] == 8
    with pytest.raises(UserError, match="--task-suite-name libero_goal is --env libero-goal"):
        suite_and_env(_options(env="pusht", task_suite_name="libero_goal"))
    with pytest.raises(UserError, match="not a LIBERO suite"):
        suite_and_env(_options(task_suite_name="libero_99"))
    with pytest.raises(UserError, match="--resize-size 128: --env pusht does not take it"):
        suite_and_env(_options(env="pusht", resize_size=128))


def test_resize_with_pad_follows_openpis_image_tools() -> None:
    """openpi-client's image_tools_test cases, and where the padding goes, worked out by hand from its code."""
    from lmmbench.episodes.envs.images import resize_with_pad

    for (h, w), (th, tw) in (((10, 10), (20, 20)), ((30, 30), (15, 15)), ((50, 50), (50, 50)), ((256, 320), (60, 80))):
        out = resize_with_pad(np.zeros((h, w, 3), np.uint8), th, tw)
        assert out.shape == (th, tw, 3) and not out.any()
    # 256 x 320 -> 60 x 80: ratio max(320/80, 256/60) = 4.267, the image 60 x 75, pasted at column int(5 / 2) = 2
    out = resize_with_pad(np.full((256, 320, 3), 255, np.uint8), 60, 80)
    assert (out[:, 2:77] == 255).all() and not out[:, :2].any() and not out[:, 77:].any()
    # 2 x 4 -> 4 x 4: ratio 1, no resize, pasted at row int(2 / 2) = 1
    small = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    out = resize_with_pad(small, 4, 4)
    assert (out[1:3] == small).all() and not out[0].any() and not out[3].any()
    same = np.ones((7, 7, 3), np.uint8)
    assert resize_with_pad(same, 7, 7) is same  # already the size: as it is


class _Recorder:
    """A real environment of its own that records what it is reset with and stepped with."""

    resets: list[int | None] = []
    steps: list[Any] = []

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self.resets.append(seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.steps.append(np.asarray(action).tolist())
        return np.zeros(2, np.float32), 0.0, False, False, {}


def test_trial_i_resets_with_i_and_the_suites_warmup_action_is_stepped() -> None:
    """reset_by_trial (LIBERO) resets trial i with i, as openpi's ``set_init_state(initial_states[episode_idx])``;
    the suite's warm-up action (openpi's) is stepped ``num_steps_wait`` times, not the policy's."""
    import gymnasium

    from lmmbench.episodes import EpisodeKey, EpisodeScheduler
    from lmmbench.episodes.envs.gym_adapter import RandomPolicy

    _Recorder.resets, _Recorder.steps = [], []
    policy = RandomPolicy(gymnasium.spaces.Box(-1, 1, (7,), np.float32))
    keys = [EpisodeKey(0, t) for t in range(4)]
    sched = EpisodeScheduler(lambda task: _Recorder(), policy, keys, num_parallel=1, num_steps_wait=2, max_steps=1,
                             seed=5, warmup_action=tuple(OPENPI_DUMMY_ACTION), reset_by_trial=True)
    results = list(sched.run())
    assert _Recorder.resets == [0, 1, 2, 3]
    assert [r.seed for r in results] != [0, 1, 2, 3]  # the policy's noise keeps lmmbench's per-episode seed
    warm = [s for s in _Recorder.steps if s == OPENPI_DUMMY_ACTION]
    assert len(warm) == 2 * 4 and len(_Recorder.steps) == 3 * 4


def test_replan_steps_executes_the_first_n_actions_of_each_chunk(tmp_path: Path) -> None:
    """openpi's ``action_plan.extend(action_chunk[: replan_steps])``: an infer policy with chunks of 6 is called
    every 2 steps with --replan-steps 2, every 6 without; a chunk shorter than replan_steps is refused."""
    (tmp_path / "chunks.py").write_text(
        "import numpy as np\n\n\nclass Six:\n    def infer(self, obs):\n"
        "        return {'actions': np.tile(np.sign(-obs['position']), (6, 1)).astype(np.float32)}\n")
    calls = {}
    for replan in (None, 2):
        out = tmp_path / f"r{replan}"
        argv = ["run", "episodic-eval", "--policy", f"{tmp_path}/chunks.py:Six", "--num-tasks", "1",
                "--num-trials-per-task", "1", "--num-steps-wait", "0", "--max-steps", "12", "--warmup", "0",
                "--out-dir", str(out), "--no-progress"]  # fmt: skip
        assert main([*argv, *(["--replan-steps", str(replan)] if replan else [])]) == 0
        with (out / "episodic-eval" / "episodic-eval_results.csv").open(newline="") as fh:
            (row,) = list(csv.DictReader(fh))
        run = json.loads((out / "episodic-eval" / "run.json").read_text())["run"]["episodic_eval"]
        calls[replan] = (int(row["action_calls"]), int(row["steps"]), run["replan_steps"])
    assert calls[None][0] == -(-calls[None][1] // 6) and calls[None][2] is None
    assert calls[2][0] == -(-calls[2][1] // 2) and calls[2][2] == 2
    assert main(["run", "episodic-eval", "--policy", f"{tmp_path}/chunks.py:Six", "--num-tasks", "1",
                 "--num-trials-per-task", "1", "--num-steps-wait", "0", "--replan-steps", "7",
                 "--out-dir", str(tmp_path / "r7")]) == 2  # fmt: skip


@pytest.mark.parametrize(("argv", "says"), [
    (["--policy", "toy", "--replan-steps", "2"], "--replan-steps 2: --policy toy is lmmbench's"),
    (["--policy", "toy", "--revision", "main"], "--revision main: --policy toy loads no model"),
    (["--policy", "toy", "--policy-keys", "lerobot"], "--policy-keys lerobot: --policy toy is lmmbench's"),
])
def test_options_that_cannot_act_are_refused_in_one_line(argv: list[str], says: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "episodic-eval", *argv, "--num-tasks", "1", "--num-trials-per-task", "1",
                 "--out-dir", str(tmp_path)]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_execute_steps_and_keys_of_an_adapted_policy_on_toy_waypoints_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.py").write_text("import numpy as np\n\n\nclass P:\n    def infer(self, obs):\n"
                                   "        return np.zeros((2, 2), np.float32)\n")
    base = ["run", "episodic-eval", "--policy", f"{tmp_path}/p.py:P", "--num-tasks", "1", "--num-trials-per-task",
            "1", "--num-steps-wait", "0", "--out-dir", str(tmp_path / "o")]  # fmt: skip
    assert main([*base, "--execute-steps", "2"]) == 2
    assert "give --replan-steps N" in capsys.readouterr().err
    assert main([*base, "--policy-keys", "openpi"]) == 2
    assert "--env toy-waypoints has no openpi keys" in capsys.readouterr().err


def test_episode_seed_is_lmmbenchs_per_episode_seeding_and_seed_its_default(tmp_path: Path) -> None:
    """--episode-seed picks the per-episode seeds (the seed column and the policy's noise); without it --seed does,
    as before; on Push-T --seed is no environment seed (openpi's seed is LIBERO's)."""
    def seeds(*extra: str) -> tuple[list[str], dict[str, Any]]:
        out = tmp_path / "_".join(extra)
        assert main(["run", "episodic-eval", "--num-tasks", "2", "--num-trials-per-task", "1", "--max-steps", "3",
                     "--warmup", "0", "--no-progress", "--out-dir", str(out), *extra]) == 0  # fmt: skip
        with (out / "episodic-eval" / "episodic-eval_results.csv").open(newline="") as fh:
            column = [r["seed"] for r in csv.DictReader(fh)]
        return column, json.loads((out / "episodic-eval" / "run.json").read_text())["run"]["episodic_eval"]

    by_seed, run = seeds("--seed", "5")
    by_episode_seed, run_e = seeds("--episode-seed", "5")
    plain, _ = seeds("--seed", "0")
    assert by_seed == by_episode_seed != plain
    assert (run["episode_seed"], run_e["episode_seed"], run["env_seed"]) == (5, 5, None)
