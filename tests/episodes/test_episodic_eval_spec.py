"""``lmmbench run episodic-eval`` end to end: the issue's must-show pair of runs in one process,
the openpi LIBERO YAML keys, resume, the serial comparison in one run, gymnasium and chat episodes."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.episodes.compare import compare_runs, read_traces


def _rows(out: Path) -> dict[str, dict[str, str]]:
    with (out / "episodic-eval" / "episodic-eval_results.csv").open(newline="") as fh:
        return {r["sample_id"]: r for r in csv.DictReader(fh)}


def _analysis(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "episodic-eval" / "episodic-eval_analysis.json").read_text())
    return data


def test_parallel_8_and_serial_give_the_same_episodes_and_batching_is_faster(tmp_path: Path) -> None:
    common = ["run", "episodic-eval", "--num-tasks", "8", "--num-trials-per-task", "2", "--seed", "0",
              "--no-progress"]
    assert main([*common, "--num-parallel", "8", "--out-dir", str(tmp_path / "par")]) == 0
    assert main([*common, "--num-parallel", "1", "--out-dir", str(tmp_path / "ser")]) == 0
    par, ser = _rows(tmp_path / "par"), _rows(tmp_path / "ser")
    assert sorted(par) == sorted(ser) == sorted(f"task{t}_trial{r}" for t in range(8) for r in range(2))
    for sid, row in ser.items():
        assert (par[sid]["success"], par[sid]["steps"]) == (row["success"], row["steps"]), sid
        assert par[sid]["status"] == "ok"
    successes = sum(int(r["success"]) for r in par.values())
    assert 0 < successes < len(par)
    assert {int(n) for r in ser.values() for n in r["action_batch_sizes"].split()} == {1}
    assert max(int(n) for r in par.values() for n in r["action_batch_sizes"].split()) == 8
    eq = compare_runs(read_traces(tmp_path / "par" / "episodic-eval" / "episodic-eval_traces.jsonl"),
                      read_traces(tmp_path / "ser" / "episodic-eval" / "episodic-eval_traces.jsonl"))
    assert eq["episodes_compared"] == 16 and eq["same_outcomes"] and eq["max_action_abs_diff"] <= 1e-5
    a_par, a_ser = _analysis(tmp_path / "par"), _analysis(tmp_path / "ser")
    assert a_par["success"]["overall"]["successes"] == successes
    low, high = a_par["success"]["overall"]["ci95_low"], a_par["success"]["overall"]["ci95_high"]
    assert low < successes / 16 < high
    assert a_par["run"]["wall_ms"] < a_ser["run"]["wall_ms"]  # batched is faster (ratio ~5 expected)
    assert a_par["run"]["action_calls"] < a_ser["run"]["action_calls"]
    for name in ("episodic-eval_plot.png", "episodic-eval_summary.csv", "run.json", "report.html"):
        assert (tmp_path / "par" / "episodic-eval" / name).is_file()


def test_a_yaml_config_with_the_libero_eval_keys_compare_serial_and_resume(tmp_path: Path) -> None:
    cfg = tmp_path / "eval.yaml"
    cfg.write_text("num_trials_per_task: 2\nnum_steps_wait: 2\nnum_parallel: 3\nnum_tasks: 3\n"
                   f"policy: toy-prefix-cache\nout_dir: {tmp_path / 'o'}\nprogress: false\ncompare_serial: true\n")
    assert main(["run", "episodic-eval", "--config", str(cfg)]) == 0
    out = tmp_path / "o"
    first = _rows(out)
    run = json.loads((out / "episodic-eval" / "run.json").read_text())
    assert run["run"]["episodic_eval"]["num_parallel"] == 3
    eq = _analysis(out)["equivalence"]
    assert eq["outcomes"]["episodes_compared"] == 6 and eq["outcomes"]["same_outcomes"]
    assert eq["verdict"] == "equivalent" and eq["actions"]["agree"] and eq["actions"]["action_calls_recomputed"] > 0
    assert _analysis(out)["speedup_vs_serial"]["pairs"] == 5
    # resume: drop the last three rows; only those episodes run again, with the same outcomes
    results = out / "episodic-eval" / "episodic-eval_results.csv"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text("".join(lines[:-3]))
    assert main(["run", "episodic-eval", "--config", str(cfg), "--resume", "--no-compare-serial"]) == 0
    again = _rows(out)
    assert {k: (r["success"], r["steps"]) for k, r in again.items()} == \
        {k: (r["success"], r["steps"]) for k, r in first.items()}
    env = json.loads((out / "episodic-eval" / "run.json").read_text())["run"]["episodic_eval"]
    assert env["episodes_this_run"] == 3


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "episodic-eval", "--env", "nope", "--out-dir", str(tmp_path), "--no-progress"]) == 2
    assert "unknown episode_suites 'nope'" in capsys.readouterr().err
    assert main(["run", "episodic-eval", "--execute-steps", "9", "--out-dir", str(tmp_path), "--no-progress"]) == 2


def test_gymnasium_environment_through_the_adapter(tmp_path: Path) -> None:
    common = ["run", "episodic-eval", "--env", "gym:CartPole-v1", "--num-tasks", "2", "--num-trials-per-task",
              "2", "--num-steps-wait", "0", "--no-progress"]
    assert main([*common, "--num-parallel", "2", "--out-dir", str(tmp_path / "p")]) == 0
    assert main([*common, "--num-parallel", "1", "--out-dir", str(tmp_path / "s")]) == 0
    par, ser = _rows(tmp_path / "p"), _rows(tmp_path / "s")
    assert {k: r["steps"] for k, r in par.items()} == {k: r["steps"] for k, r in ser.items()}
    assert all(r["success"] == "" for r in par.values())  # CartPole gives no success verdict: absent
    assert len({r["steps"] for r in par.values()}) > 1  # seeds differ per episode


def test_chat_turns_are_batched_and_transcripts_equal_serial(tmp_path: Path) -> None:
    common = ["run", "episodic-eval", "--env", "chat", "--num-tasks", "4", "--num-trials-per-task", "1",
              "--num-steps-wait", "0", "--warmup", "0", "--no-progress", "--compare-serial",
              "--out-dir", str(tmp_path)]
    assert main(common) == 0
    a = _analysis(tmp_path)
    eq = a["equivalence"]
    assert eq["outcomes"]["episodes_compared"] == 4
    assert eq["outcomes"]["same_transcripts"] is True, eq["outcomes"]["first_token_divergence"]
    # the replies are generated in the planning call: the batched ones recomputed one conversation at a time
    assert eq["actions"]["planning_calls_recomputed"] >= 1 and eq["verdict"] == "equivalent", eq
    rows = _rows(tmp_path)
    sizes = [int(n) for r in rows.values() for n in r["planning_batch_sizes"].split()]
    assert max(sizes) == 4  # the first turn of all four conversations was one generate_many call
    turns = {k: len(v.trace) for k, v in read_traces(tmp_path / "episodic-eval" / "episodic-eval_traces.jsonl").items()}
    assert all(turns[k] == int(r["steps"]) for k, r in rows.items())
