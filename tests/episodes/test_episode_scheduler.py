"""The slot scheduler's tick order, batching and serial equivalence, with scripted environments
and policies (plain Python objects that log every call), plus Wilson intervals and run comparison."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from lmmbench.episodes import ActItem, EpisodeKey, EpisodeMemory, EpisodeScheduler, episode_seed
from lmmbench.episodes.analysis import wilson_interval
from lmmbench.episodes.compare import EpisodeOutcome, compare_runs


def _length(seed: int) -> int:
    return 3 + seed % 4


class CountdownEnv:
    """Ends after 3..6 real actions (drawn from its reset seed); success when that length is even."""

    def __init__(self, task: int, log: list[tuple[Any, ...]]) -> None:
        self.task, self.log = task, log
        self.length = self.done = 0

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        assert seed is not None
        self.length, self.done = _length(seed), 0
        self.log.append(("reset", self.task))
        return 0, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.log.append(("step", self.task, action))
        if action != "noop":
            self.done += 1
        over = self.done >= self.length
        return self.done, 0.0, over, False, {"success": over and self.length % 2 == 0}


class LoggingPolicy:
    """Chunks of two actions; plans again after every second chunk; logs each call."""

    name = "logging"

    def __init__(self, log: list[tuple[Any, ...]], batched_planning: bool = False) -> None:
        self.log = log
        self.batched_planning = batched_planning

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        return EpisodeMemory(key=key, seed=seed)

    def dummy_action(self) -> Any:
        return "noop"

    def plan(self, items: Sequence[ActItem]) -> None:
        self.log.append(("plan", [it.memory.key.task for it in items]))
        for it in items:
            it.memory.data["chunks"] = 0

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        self.log.append(("act", [it.memory.key.task for it in items]))
        for it in items:
            it.memory.data["chunks"] += 1
            it.memory.trace.append([float(it.observation)])
        return [["go", "go"] for _ in items]

    def needs_plan(self, item: ActItem) -> bool:
        return bool(item.memory.data["chunks"] % 2 == 0)


def _run(num_parallel: int, tasks: int = 3, trials: int = 2, wait: int = 2, batched: bool = False,
         max_steps: int = 50, steal: bool = False,
         ) -> tuple[dict[EpisodeKey, Any], list[tuple[Any, ...]], EpisodeScheduler]:
    log: list[tuple[Any, ...]] = []
    episodes = [EpisodeKey(t, r) for t in range(tasks) for r in range(trials)]
    sched = EpisodeScheduler(lambda task: CountdownEnv(task, log), LoggingPolicy(log, batched), episodes,
                             num_parallel=num_parallel, num_steps_wait=wait, max_steps=max_steps, seed=7,
                             steal_trials=steal)
    return {r.key: r for r in sched.run()}, log, sched


def test_tick_follows_the_order_wait_execute_plan_act() -> None:
    _, log, _ = _run(num_parallel=3)
    # tick 1: every slot steps one dummy action; tick 2: again, then all three plan, then ONE act for all
    assert log[:3] == [("reset", 0), ("reset", 1), ("reset", 2)]
    assert log[3:6] == [("step", t, "noop") for t in range(3)]
    assert log[6:9] == [("step", t, "noop") for t in range(3)]
    assert log[9:12] == [("plan", [0]), ("plan", [1]), ("plan", [2])]
    assert log[12] == ("act", [0, 1, 2])
    # tick 3: each slot executes one action of its chunk; nobody needs the expert yet
    assert log[13:16] == [("step", t, "go") for t in range(3)]
    assert log[16] == ("step", 0, "go")  # tick 4 starts: chunks of two were used up at the end of tick 4


def test_every_action_call_takes_every_slot_waiting_for_it() -> None:
    results, log, sched = _run(num_parallel=3, trials=3)
    acts = [entry[1] for entry in log if entry[0] == "act"]
    assert len(acts) == sched.totals.action_calls
    assert all(len(set(a)) == len(a) for a in acts)  # one request per slot per call
    assert max(len(a) for a in acts) == 3
    assert sum(len(a) for a in acts) == sum(r.action_calls for r in results.values())
    for r in results.values():
        assert len(r.action_batch_sizes) == r.action_calls


def test_batched_planning_is_one_call_for_all_slots() -> None:
    _, log, _ = _run(num_parallel=3, batched=True)
    plans = [entry[1] for entry in log if entry[0] == "plan"]
    assert plans[0] == [0, 1, 2]


@pytest.mark.parametrize("num_parallel", [2, 3, 5])
def test_parallel_gives_the_serial_outcomes(num_parallel: int) -> None:
    serial, _, _ = _run(num_parallel=1)
    batched, _, _ = _run(num_parallel=num_parallel)
    assert set(serial) == set(batched) == {EpisodeKey(t, r) for t in range(3) for r in range(2)}
    for key, r in serial.items():
        length = _length(episode_seed(7, key))  # ground truth from the environment's rule
        assert r.steps == batched[key].steps == length
        assert r.success == batched[key].success == (length % 2 == 0)
        assert r.trace == batched[key].trace


def test_warm_up_steps_dummy_actions_and_slots_keep_their_task() -> None:
    results, log, _ = _run(num_parallel=1, tasks=2, trials=2, wait=3)
    assert [e for e in log if e[0] == "reset"] == [("reset", 0), ("reset", 0), ("reset", 1), ("reset", 1)]
    first = log.index(("reset", 0))
    assert log[first + 1:first + 4] == [("step", 0, "noop")] * 3
    assert [k for k in results] == [EpisodeKey(0, 0), EpisodeKey(0, 1), EpisodeKey(1, 0), EpisodeKey(1, 1)]


def test_max_steps_cuts_an_episode_without_a_success() -> None:
    results, _, _ = _run(num_parallel=2, max_steps=2)
    assert all(r.steps == 2 and r.success is False for r in results.values())


def test_wilson_interval_known_values() -> None:
    low, high = wilson_interval(0, 10) or (None, None)
    assert low == 0.0 and high == pytest.approx(3.8414588 / 13.8414588, rel=1e-6)  # z^2 / (n + z^2)
    low, high = wilson_interval(5, 10) or (None, None)
    assert (low, high) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    assert wilson_interval(0, 0) is None


def test_compare_runs_reports_first_token_divergence_and_action_difference() -> None:
    a = {"e0": EpisodeOutcome(True, 3, [[1, 2, 3], [4, 5, 6, 7]]), "e1": EpisodeOutcome(None, 2, [[1]])}
    b = {"e0": EpisodeOutcome(True, 3, [[1, 2, 3], [4, 5, 9, 7]]), "e1": EpisodeOutcome(None, 2, [[1]])}
    rep = compare_runs(a, b)
    assert rep["first_token_divergence"] == {"episode": "e0", "turn": 1, "token": 2}
    assert rep["same_transcripts"] is False and rep["same_outcomes"] is True
    x = {"e": EpisodeOutcome(False, 4, [[[0.5, 1.0]], [[2.0, 3.0]]])}
    y = {"e": EpisodeOutcome(False, 5, [[[0.5, 1.0]], [[2.0, 3.25]]])}
    rep = compare_runs(x, y)
    assert rep["max_action_abs_diff"] == 0.25 and rep["actions_within_tolerance"] is False
    assert rep["outcome_mismatches"] == [{"episode": "e", "success": [False, False], "steps": [4, 5]}]


def test_free_slots_take_trials_left_by_others_and_outcomes_stay() -> None:
    serial, _, _ = _run(num_parallel=1, tasks=2, trials=4)
    stolen, log, _ = _run(num_parallel=3, tasks=2, trials=4, steal=True)  # stealing is an option (default off)
    assert {k: (r.steps, r.success) for k, r in stolen.items()} == {k: (r.steps, r.success) for k, r in serial.items()}
    by_slot = {r.key: r.slot for r in stolen.values()}
    assert 2 in by_slot.values()  # the third slot had no task of its own: it ran trials of task 0 or 1
    assert sum(1 for e in log if e[0] == "reset") == 8
    log2: list[tuple[Any, ...]] = []
    keep = EpisodeScheduler(lambda task: CountdownEnv(task, log2), LoggingPolicy(log2), list(stolen),
                            num_parallel=3, num_steps_wait=2, max_steps=50, seed=7)  # the design's default: off
    assert {r.slot for r in keep.run()} == {0, 1}
