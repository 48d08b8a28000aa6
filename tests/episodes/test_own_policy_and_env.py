"""The user's own policy and environment: the docs' worked example runs as written (read from
docs/episodes.md), a policy that does not fit an environment is one line and exit 2, and the
batched path makes ONE model forward per tick (counted with a torch forward hook)."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "episodes.md"


def _block(marker: str) -> str:
    """The fenced code block right after ``<!-- example: marker -->`` in docs/episodes.md."""
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(rf"<!-- example: {re.escape(marker)} -->\s*```\w*\n(.*?)```", text, re.S)
    assert found, f"no example {marker!r} in {DOCS}"
    return found.group(1)


@pytest.fixture
def example_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "my_episodes.py").write_text(_block("my_episodes.py"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_docs_example_runs_as_written(example_dir: Path) -> None:
    code = _block("my_episodes.py")
    assert len(code.splitlines()) < 50
    args = shlex.split(_block("command").replace("\\\n", " "))
    assert args[:3] == ["lmmbench", "run", "episodic-eval"]
    assert main([*args[1:], "--no-progress"]) == 0
    spec_dir = example_dir / "results" / "own" / "episodic-eval"
    analysis = json.loads((spec_dir / "episodic-eval_analysis.json").read_text())
    overall = analysis["success"]["overall"]
    assert overall["episodes"] == 16 and 0 < overall["successes"] < 16  # the noise decides some episodes
    outcomes = analysis["equivalence"]["outcomes"]
    assert outcomes["same_outcomes"] and outcomes["episodes_compared"] == 16
    assert analysis["equivalence"]["verdict"] == "equivalent"
    run = json.loads((spec_dir / "run.json").read_text())["run"]["episodic_eval"]
    assert run["policy"] == "torch-linear" and run["num_parallel"] == 4


def test_policy_that_does_not_fit_the_environment_is_one_line(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "episodic-eval", "--env", "gym:CartPole-v1", "--policy", "toy", "--no-progress",
                 "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--policy toy" in err[0] and "--env gym:CartPole-v1" in err[0], err


def test_missing_module_file_or_class_is_one_line(example_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for ref, says in (("no_such_mod:P", "No module named"), ("nowhere/x.py:P", "no such file"),
                      ("my_episodes.py:Nope", "has no 'Nope'")):
        assert main(["run", "episodic-eval", "--policy", ref, "--no-progress", "--out-dir", "o"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0] and ref in err[0], err


def test_one_model_forward_per_tick_for_all_slots_that_act(example_dir: Path) -> None:
    from lmmbench.episodes import EpisodeKey, EpisodeScheduler, PolicySettings, make_policy, resolve_suite

    sys.path.insert(0, str(example_dir))
    try:
        policy: Any = make_policy("my_episodes:TorchPolicy", PolicySettings())
        suite = resolve_suite("my_episodes:Reach")
    finally:
        sys.path.remove(str(example_dir))
    episodes = [EpisodeKey(t, r) for t in range(4) for r in range(3)]
    sched = EpisodeScheduler(suite.make_env, policy, episodes, num_parallel=4, num_steps_wait=1, max_steps=6, seed=0)
    calls: dict[int, list[int]] = {}  # tick -> batch size of each forward of the model in that tick
    handle = policy.net.register_forward_hook(
        lambda _m, inputs, _out: calls.setdefault(sched.totals.ticks, []).append(int(inputs[0].shape[0])))
    try:
        results = list(sched.run())
    finally:
        handle.remove()
    assert len(results) == len(episodes)
    assert all(len(sizes) == 1 for sizes in calls.values()), calls  # never a loop over slots
    assert [s[0] for _, s in sorted(calls.items())] == sched.totals.action_batch_sizes
    assert max(sched.totals.action_batch_sizes) == 4  # the forward really held several episodes


COUNTING_ENV = '''
import numpy as np

OPENED, CLOSED = [], []


class Counted:
    """Reward 1 per step, ends after 5 steps; records every make and close."""

    def __init__(self, task):
        self.task, self.n = task, 0
        OPENED.append(self)

    def reset(self, seed=None):
        self.n = 0
        return np.zeros(1), {"success": False}

    def step(self, action):
        self.n += 1
        return np.zeros(1), 1.0, self.n >= 5, False, {"success": self.n >= 5}

    def close(self):
        CLOSED.append(self)
'''


def test_environments_are_closed_and_warm_up_reward_is_counted_apart(tmp_path: Path) -> None:
    import importlib

    from lmmbench.episodes import EpisodeKey, EpisodeScheduler, resolve_suite

    (tmp_path / "counted_env.py").write_text(COUNTING_ENV, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        suite = resolve_suite("counted_env:Counted")
        policy = _ZeroPolicy()
        mod = importlib.import_module("counted_env")
        mod.OPENED.clear()
        mod.CLOSED.clear()
        episodes = [EpisodeKey(t, r) for t in range(3) for r in range(3)]  # 3 tasks on 2 slots: trials stolen
        sched = EpisodeScheduler(suite.make_env, policy, episodes, num_parallel=2, num_steps_wait=2, max_steps=50,
                                 seed=0, steal_trials=True)  # stealing is an option now (the design: off)
        results = list(sched.run())
        assert len(mod.OPENED) > 3 and sorted(map(id, mod.OPENED)) == sorted(map(id, mod.CLOSED))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("counted_env", None)
    for r in results:  # 2 warm-up steps + 3 policy steps = 5 env steps; reward 1 per step
        assert (r.steps, r.total_reward, r.extra["warmup_steps"], r.extra["warmup_reward"]) == (3, 3.0, 2, 2.0)
        assert r.success is True


class _ZeroPolicy:
    name = "zero"
    batched_planning = False

    def new_episode(self, key: Any, seed: int) -> Any:
        from lmmbench.episodes import EpisodeMemory

        return EpisodeMemory(key=key, seed=seed)

    def dummy_action(self) -> int:
        return 0

    def plan(self, items: Any) -> None:
        del items

    def needs_plan(self, item: Any) -> bool:
        return False

    def act(self, items: Any) -> list[list[int]]:
        return [[0] for _ in items]


CARTPOLE_POLICY = '''
from lmmbench.episodes import SimplePolicy


class Balance(SimplePolicy):
    """Push toward the side the pole leans to: one decision per slot, all slots in one call."""

    def dummy_action(self):
        return 0

    def act(self, items):
        return [[int(it.observation[2] + it.observation[3] > 0)] for it in items]
'''


def test_own_policy_on_a_gym_id_environment(tmp_path: Path) -> None:
    (tmp_path / "balance.py").write_text(CARTPOLE_POLICY, encoding="utf-8")
    common = ["run", "episodic-eval", "--env", "gym:CartPole-v1", "--policy", f"{tmp_path / 'balance.py'}:Balance",
              "--num-tasks", "2", "--num-trials-per-task", "2", "--max-steps", "60", "--no-progress",
              "--num-steps-wait", "1"]  # the design's 10 warm-up pushes to one side would tip the pole first
    assert main([*common, "--num-parallel", "4", "--out-dir", str(tmp_path / "o")]) == 0
    import csv

    with (tmp_path / "o" / "episodic-eval" / "episodic-eval_results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    # the balancing policy keeps the pole up far longer than random pushes (~20 steps): all hit --max-steps
    assert all(int(r["steps"]) == 60 and float(r["total_reward"]) == 60.0 for r in rows)
