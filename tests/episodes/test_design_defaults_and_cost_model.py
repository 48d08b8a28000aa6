"""The episodic design's defaults (shipped config file, CLI defaults), the options that only the pi0 policies
take, and the design's cost model evaluated with separately timed terms (injected ground truth, then a real run)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.config.loaders import load_config_file, parse_model
from lmmbench.episodes.cost_model import predict_speedup, run_terms
from lmmbench.episodes.scheduler import RunTotals
from lmmbench.specs.episodic_eval import DESIGN_CONFIG, EpisodicEvalOptions

# The design's YAML: "num_trials_per_task: 50", "num_steps_wait: 10", "num_parallel: 10 # (默认 = num_tasks)";
# trials of a task stay in its slot (no stealing).
DESIGN = {"num_trials_per_task": 50, "num_steps_wait": 10, "num_parallel": None, "steal_trials": False}


def test_the_shipped_config_and_the_cli_defaults_are_the_designs() -> None:
    shipped = parse_model(EpisodicEvalOptions, load_config_file(DESIGN_CONFIG))
    defaults = EpisodicEvalOptions()
    for key, value in DESIGN.items():
        assert getattr(shipped, key) == value, key
        assert getattr(defaults, key) == value, key
    assert DESIGN_CONFIG.is_file() and "lmmbench" in DESIGN_CONFIG.parts[-3]  # inside the installed package


def _out(tmp: Path, name: str) -> Path:
    return tmp / name / "episodic-eval"


def test_a_run_with_the_shipped_config_waits_10_steps_and_runs_every_task_at_once(tmp_path: Path) -> None:
    argv = ["run", "episodic-eval", "--config", str(DESIGN_CONFIG), "--num-tasks", "3", "--num-trials-per-task",
            "1", "--max-steps", "20", "--warmup", "0", "--no-progress", "--out-dir", str(tmp_path / "d")]
    assert main(argv) == 0
    env = json.loads((_out(tmp_path, "d") / "run.json").read_text())["run"]["episodic_eval"]
    assert (env["num_parallel"], env["steal_trials"], env["num_steps_wait"]) == (3, False, 10)
    rows = list(csv.DictReader((_out(tmp_path, "d") / "episodic-eval_results.csv").open()))
    assert len(rows) == 3 and all(r["warmup_steps"] == "10" for r in rows)
    assert sorted(int(r["slot"]) for r in rows) == [0, 1, 2]  # one task per slot


def test_pi0_only_options_are_refused_elsewhere_and_batched_planning_is_honoured(tmp_path: Path) -> None:
    base = ["run", "episodic-eval", "--num-tasks", "2", "--num-trials-per-task", "1", "--max-steps", "20",
            "--warmup", "0", "--no-progress"]
    assert main([*base, "--batched-planning", "--out-dir", str(tmp_path / "a")]) == 2  # toy: no planner model
    for steps in ("2", "1"):  # chunks last their waypoint pair's duration: even the default value is refused
        assert main([*base, "--env", "pusht", "--policy", "pi0-tiny", "--execute-steps", steps,
                     "--out-dir", str(tmp_path / f"b{steps}")]) == 2
    sizes = {}
    for batched in (False, True):
        flag = ["--batched-planning"] if batched else []
        out = tmp_path / f"p{int(batched)}"
        assert main([*base, "--env", "pusht", "--policy", "pi0-tiny", "--num-steps-wait", "1", *flag,
                     "--out-dir", str(out)]) == 0
        rows = list(csv.DictReader((out / "episodic-eval" / "episodic-eval_results.csv").open()))
        sizes[batched] = [int(n) for r in rows for n in r["planning_batch_sizes"].split()]
        assert all(1 <= int(k) <= 7 for r in rows for k in r["waypoints_per_replan"].split())
    assert set(sizes[False]) == {1}
    assert max(sizes[True]) == 2  # both slots plan in the same tick after the same warm-up


def _totals(**calls: Any) -> RunTotals:
    t = RunTotals()
    t.planning_call_ms = calls["vlm"]
    t.action_call_ms = calls["ae"]
    t.action_batch_sizes = [b for b, v in calls["ae"].items() for _ in v]
    t.env_step_ms = calls["env"]
    t.env_ns = int(sum(calls["env"]) * 1e6)
    t.episode_steps, t.episode_replans = calls["steps"], calls["replans"]
    t.plan_sizes = calls["plans"]
    return t


def test_the_cost_model_gives_the_designs_formula_from_injected_terms() -> None:
    """Serial: 4 episodes, 2 replans each of 3 waypoints, 30 env steps; T_vlm 100 ms, T_ae(1) 50 ms, T_env 2 ms
    -> 2·100 + 6·50 + 30·2 = 560 ms per episode. Batched on N = 4: every call has batch 4 and costs 80 ms
    -> 2·100 + 6·80/4 + 30·2 = 380 ms: predicted 560 / 380."""
    serial = run_terms(_totals(vlm={1: [100.0] * 8}, ae={1: [50.0] * 24}, env=[2.0] * 120, steps=[30] * 4,
                               replans=[2] * 4, plans=[3] * 8))
    par = run_terms(_totals(vlm={1: [100.0] * 8}, ae={4: [80.0] * 6}, env=[2.0] * 120, steps=[30] * 4,
                            replans=[2] * 4, plans=[3] * 8))
    assert serial["ae_calls_per_replan"] == 3 and par["ae_calls_per_episode"] == 6
    pred = predict_speedup(serial, par, 4)
    assert pred["serial_ms_per_episode"] == pytest.approx(560.0)
    assert pred["design_formula"]["parallel_ms_per_episode"] == pytest.approx(380.0)
    assert pred["design_formula"]["predicted_speedup"] == pytest.approx(560 / 380)
    assert pred["run_batches"]["predicted_speedup"] == pytest.approx(560 / 380)  # all calls had batch N here
    assert pred["not_measured"] is None
    assert predict_speedup(serial, serial, 1)["design_formula"]["predicted_speedup"] == pytest.approx(1.0)
    workers = _totals(vlm={1: [100.0] * 8}, ae={4: [80.0] * 6}, env=[2.0] * 120, steps=[30] * 4, replans=[2] * 4,
                      plans=[3] * 8)
    workers.env_ns //= 4  # env phases took a quarter of their steps' own times (4 workers stepping at once)
    assert run_terms(workers)["t_env_parallel_ms_per_step"] == pytest.approx(0.5)
    ragged = run_terms(_totals(vlm={1: [100.0] * 8}, ae={4: [80.0] * 4, 2: [60.0] * 4}, env=[2.0] * 120,
                               steps=[30] * 4, replans=[2] * 4, plans=[3] * 8))
    mixed = predict_speedup(serial, ragged, 4)  # (8·100 + 4·80 + 4·60) / 4 + 60 = 400 ms per episode
    assert mixed["run_batches"]["parallel_ms_per_episode"] == pytest.approx(400.0)
    assert predict_speedup(serial, run_terms(_totals(vlm={1: [100.0]}, ae={2: [60.0]}, env=[2.0], steps=[1],
                                                     replans=[1], plans=[1])), 4)["not_measured"] == ["T_ae(4)"]


def test_a_run_writes_the_terms_the_histogram_and_the_prediction_next_to_the_measured_speed_up(
        tmp_path: Path) -> None:
    argv = ["run", "episodic-eval", "--env", "pusht", "--policy", "pi0-tiny", "--num-tasks", "2",
            "--num-trials-per-task", "1", "--max-steps", "20", "--num-steps-wait", "1", "--warmup", "0",
            "--compare-serial", "--no-progress", "--out-dir", str(tmp_path / "c")]
    assert main(argv) == 0
    analysis = json.loads((_out(tmp_path, "c") / "episodic-eval_analysis.json").read_text())
    rows = list(csv.DictReader((_out(tmp_path, "c") / "episodic-eval_results.csv").open()))
    run, model = analysis["run"], analysis["cost_model"]
    assert sum(run["action_batch_histogram"].values()) == run["action_calls"]
    assert sum(int(b) * n for b, n in run["action_batch_histogram"].items()) == sum(
        int(r["action_calls"]) for r in rows)
    terms = model["terms"]
    assert terms["t_vlm_ms_by_batch"]["1"]["n"] == sum(int(r["planning_calls"]) for r in rows)
    assert terms["steps_per_episode"]["mean"] == sum(int(r["steps"]) + int(r["warmup_steps"]) for r in rows) / 2
    assert terms["t_env_ms_per_step"]["n"] == sum(int(r["steps"]) + int(r["warmup_steps"]) for r in rows)
    assert model["serial_terms"]["t_ae_ms_by_batch"]["1"]["median_ms"] > 0
    measured, speedup = model["measured_speedup"], analysis["speedup_vs_serial"]
    if speedup["measurement_error"]:  # a ratio above N under a burst of load: no median, and none copied here
        assert measured is None
    else:
        assert measured["median"] == speedup["median"] and measured["pairs"] == 5
    assert model["prediction"]["run_batches"]["predicted_speedup"] > 0
