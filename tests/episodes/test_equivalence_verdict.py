"""The episodic equivalence verdict (episodes.batch_check, episodes.verdict) and the counts that name their basis.

Verdict: under ``--compare-serial`` every batched call is recomputed one request at a time on copies of its inputs;
a policy whose actions move with the batch size is "not equivalent" (exit 4, naming the first call that disagrees),
a batch-independent one "equivalent" (exit 0), and outcomes that cannot tell runs apart are said to be so.
Counts: the slots that ran (not the option's N), the action batch per call and per request, the environment's
build and reset times apart from the scheduling, planning absent for a policy that never plans.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lmmbench.cli.main import main
from lmmbench.episodes import ActItem, EpisodeKey, EpisodeMemory, EpisodeScheduler
from lmmbench.episodes.compare import EpisodeOutcome, compare_runs
from lmmbench.episodes.verdict import outcomes_discriminate, serial_verdict

POLICIES = '''
import numpy as np
from lmmbench.episodes import SimplePolicy


class BatchSized(SimplePolicy):
    """Moves right, plus 0.001 per other request in the call: its actions depend on the batch size."""

    name = "batch-sized"

    def dummy_action(self):
        return np.zeros(2)

    def act(self, items):
        return [[np.array([1.0 + 0.001 * (len(items) - 1), 0.0])] for _ in items]


class Steady(SimplePolicy):
    """Moves right whatever runs beside it."""

    name = "steady"

    def dummy_action(self):
        return np.zeros(2)

    def act(self, items):
        return [[np.array([1.0, 0.0])] for _ in items]
'''


def _run(tmp_path: Path, policy: str, *extra: str, compare: bool = True, parallel: int = 2) -> int:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "policies.py").write_text(POLICIES, encoding="utf-8")
    argv = ["run", "episodic-eval", "--env", "toy-waypoints", "--policy", f"{tmp_path / 'policies.py'}:{policy}",
            "--num-tasks", "2", "--num-trials-per-task", "1", "--num-parallel", str(parallel), "--num-steps-wait",
            "0", "--max-steps", "3", "--warmup", "0", "--compare-serial" if compare else "--no-compare-serial",
            "--no-progress", "--out-dir", str(tmp_path / policy), *extra]  # fmt: skip
    return main(argv)


def _analysis(tmp_path: Path, policy: str) -> dict[str, Any]:
    path = tmp_path / policy / "episodic-eval" / "episodic-eval_analysis.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_a_policy_whose_actions_depend_on_the_batch_size_is_not_equivalent_exit_4(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, "BatchSized") == 4  # core.exit_codes.NOT_EQUIVALENT
    err = capsys.readouterr().err
    # the first batched call is the first tick's: both slots at step 0, slot 0 (task 0) first
    assert "not equivalent to the serial run: action call 1 (episode task0_trial0, step 0, slot 0)" in err
    eq = _analysis(tmp_path, "BatchSized")["equivalence"]
    assert eq["verdict"] == "not equivalent" and eq["actions"]["agree"] is False
    assert eq["actions"]["first_disagreement"]["rel_diff"] == pytest.approx(0.001, rel=1e-6)  # / max(1, 1.0)
    assert eq["actions"]["rtol"] == 1e-5 and eq["actions"]["dtype"] == "float32"


def test_a_batch_independent_policy_is_equivalent_exit_0_and_says_outcomes_cannot_discriminate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, "Steady", parallel=8) == 0  # 2 tasks: 2 of the 8 slots run
    out = capsys.readouterr().out
    analysis = _analysis(tmp_path, "Steady")
    eq = analysis["equivalence"]
    assert eq["verdict"] == "equivalent" and eq["actions"]["agree"] is True
    assert eq["actions"]["action_calls_recomputed"] >= 1 and eq["actions"]["max_abs_diff"] == 0.0
    # three steps right from any start reach no end: every episode ends at --max-steps without success
    assert eq["outcomes"]["discriminate"] is False
    assert "equivalent to the serial run" in out and "cannot discriminate" in out
    speed = analysis["speedup_vs_serial"]  # the speed-up is the 2 slots that ran against 1, checked against N = 2
    assert speed["num_parallel"] == 2 and speed["compared"].startswith("batched on 2 slots vs serial on 1 slot")


def test_reference_results_are_in_the_summary_line_and_a_differing_reference_exits_4(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, "Steady", compare=False) == 0
    traces = tmp_path / "Steady" / "episodic-eval" / "episodic-eval_traces.jsonl"
    capsys.readouterr()
    assert _run(tmp_path / "again", "Steady", "--reference", str(traces), compare=False) == 0
    assert "equivalent to the reference: same outcomes on 2 episode(s)" in capsys.readouterr().out
    lines = [json.loads(line) for line in traces.read_text(encoding="utf-8").splitlines()]
    lines[0]["steps"] += 1  # the reference says one episode took a step more
    traces.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert _run(tmp_path / "third", "Steady", "--reference", str(traces), compare=False) == 4
    assert "not equivalent to the reference: 1 episode(s) end otherwise" in capsys.readouterr().err


def test_outcomes_discriminate_only_when_episodes_ended_differently() -> None:
    alike = {"a": EpisodeOutcome(False, 5, []), "b": EpisodeOutcome(False, 5, [])}
    mixed = {"a": EpisodeOutcome(True, 3, []), "b": EpisodeOutcome(False, 5, [])}
    assert outcomes_discriminate(alike, max_steps=5) == (False, "every one of the 2 episode(s) failed after 5 steps "
                                                          "at --max-steps: equal outcomes cannot discriminate")
    assert outcomes_discriminate(mixed, max_steps=5) == (True, None)
    agreeing = {"agree": True, "first_disagreement": None, "error": None}
    run = {"a": EpisodeOutcome(False, 3, []), "b": EpisodeOutcome(False, 5, [])}  # a ended earlier than serially
    verdict = serial_verdict(agreeing, compare_runs(run, mixed), mixed)
    assert verdict["verdict"] == "not equivalent" and "episode a success False vs True" in verdict["reasons"][0]
    assert serial_verdict({"agree": None, "error": "x"}, compare_runs(mixed, mixed), mixed)["verdict"] == "undecided"


# -- counts that name their basis ---------------------------------------------------------------------------
class LengthEnv:
    """Task t ends after t + 1 actions; building it takes BUILD_S and every reset RESET_S (known ground truth)."""

    BUILD_S, RESET_S = 0.05, 0.02

    def __init__(self, task: int) -> None:
        time.sleep(self.BUILD_S)
        self.task, self.done = task, 0

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        time.sleep(self.RESET_S)
        self.done = 0
        return 0, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.done += 1
        return self.done, 0.0, self.done > self.task, False, {"success": True}


class ActOnlyPolicy:
    """No planner (``has_planner = False``): a chunk of one action per request."""

    name, batched_planning, has_planner = "act-only", False, False

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        return EpisodeMemory(key=key, seed=seed)

    def dummy_action(self) -> int:
        return 0

    def plan(self, items: Sequence[ActItem]) -> None:
        raise AssertionError("a policy without a planner is never asked to plan")

    def needs_plan(self, item: ActItem) -> bool:
        return False

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        return [[1] for _ in items]


def test_batch_per_call_and_per_request_build_reset_apart_and_no_planning_without_a_planner() -> None:
    sched = EpisodeScheduler(LengthEnv, ActOnlyPolicy(), [EpisodeKey(t, 0) for t in range(3)], num_parallel=8,
                             num_steps_wait=0, max_steps=10, seed=0)
    results = list(sched.run())
    totals = sched.totals.as_dict()
    assert sched.effective_parallel == 3  # 3 tasks on --num-parallel 8: 3 slots ran
    # tasks end after 1, 2, 3 actions: calls of 3, 2 and 1 requests
    assert totals["action_batch_histogram"] == {"1": 1, "2": 1, "3": 1}
    assert totals["mean_action_batch_per_call"] == pytest.approx(6 / 3)
    assert totals["mean_action_batch_per_request"] == pytest.approx((3 * 3 + 2 * 2 + 1 * 1) / 6)
    assert totals["planning_calls"] is None and totals["planning_ms"] is None
    assert all(r.planning_calls == 0 for r in results)
    assert totals["env_build_ms"] >= 3 * LengthEnv.BUILD_S * 1000  # three scenes built
    assert totals["env_reset_ms"] >= 3 * LengthEnv.RESET_S * 1000  # three episodes reset
    parts = sum(totals[k] for k in ("env_ms", "env_build_ms", "env_reset_ms", "action_ms", "scheduler_ms"))
    assert parts == pytest.approx(totals["wall_ms"], abs=1e-3)  # scheduling is what is left, not builds and resets
    assert totals["scheduler_ms"] < totals["env_build_ms"]


def test_effective_n_and_planning_columns_in_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--num-parallel 8 with 2 tasks: 2 slots ran, which the analysis, run.json and the finding say; a policy
    without a planner leaves the planning columns empty."""
    (tmp_path / "policies.py").write_text(POLICIES, encoding="utf-8")
    assert main(["run", "episodic-eval", "--env", "toy-waypoints", "--policy", f"{tmp_path / 'policies.py'}:Steady",
                 "--num-tasks", "2", "--num-trials-per-task", "1", "--num-parallel", "8", "--num-steps-wait", "0",
                 "--max-steps", "2", "--warmup", "0", "--no-progress", "--out-dir", str(tmp_path)]) == 0
    spec = tmp_path / "episodic-eval"
    analysis = json.loads((spec / "episodic-eval_analysis.json").read_text(encoding="utf-8"))
    run = json.loads((spec / "run.json").read_text(encoding="utf-8"))["run"]["episodic_eval"]
    assert analysis["num_parallel_effective"] == 2 and run["num_parallel_effective"] == 2 and run["num_parallel"] == 8
    assert "2 slot(s) ran" in capsys.readouterr().out
    import csv

    rows = list(csv.DictReader((spec / "episodic-eval_results.csv").open(encoding="utf-8")))
    assert rows and all(r["planning_calls"] == "" and r["planning_ms"] == "" for r in rows)
    assert analysis["run"]["planning_calls"] is None


def test_toy_policy_with_a_planner_counts_its_planning_calls() -> None:
    from lmmbench.episodes.envs.toy_waypoints import ToyWaypointsEnv
    from lmmbench.episodes.policies.toy import ToyWaypointPolicy

    sched = EpisodeScheduler(ToyWaypointsEnv, ToyWaypointPolicy(), [EpisodeKey(0, 0)], num_parallel=1,
                             num_steps_wait=0, max_steps=4, seed=0)
    (result,) = list(sched.run())
    assert result.planning_calls >= 1 and sched.totals.as_dict()["planning_calls"] >= 1


def test_value_diff_compares_floats_with_tolerance_and_the_rest_exactly() -> None:
    from lmmbench.episodes.batch_check import value_diff

    a = {"x": np.array([1.0, 2.0], dtype=np.float32), "n": [1, 2], "s": "ok"}
    assert value_diff(a, {"x": np.array([1.0, 2.5]), "n": [1, 2], "s": "ok"})[:2] == (0.5, 2.5)
    assert value_diff(a, {"x": np.array([1.0, 2.0]), "n": [1, 3], "s": "ok"})[2] == "n[1]: 2 vs 3"
    assert value_diff(a, {"x": np.array([1.0]), "n": [1, 2], "s": "ok"})[2] == "x: ndarray(2,) vs ndarray(1,)"
