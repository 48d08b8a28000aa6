"""``--compare-serial``: interleaved serial / batched pairs give a median speed-up with its min-max, and
a ratio above N (forced with a fake clock) is flagged as a measurement error, never reported as a
speed-up. The run log's headline carries success rate, interval, episodes/s and the speed-up."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main

COMMON = ["run", "episodic-eval", "--num-tasks", "4", "--num-trials-per-task", "1", "--num-parallel", "4",
          "--max-steps", "8", "--compare-serial", "--no-progress"]


def _spec_dir(out: Path) -> Path:
    return out / "episodic-eval"


def test_compare_serial_reports_median_and_spread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # one warm-up episode first: without it the first serial run pays torch's first-call costs and its
    # ratio exceeded N (seen once in 9 runs here), which the summary then rightly refuses
    args = [*COMMON, "--warmup", "1", "--out-dir", str(tmp_path)]
    assert main(args) == 0
    analysis = json.loads((_spec_dir(tmp_path) / "episodic-eval_analysis.json").read_text())
    speed = analysis["speedup_vs_serial"]
    assert speed["pairs"] == 5 and len(speed["ratios"]) == 5 and len(speed["serial_wall_ms"]) == 5
    out = capsys.readouterr().out
    if speed["measurement_error"] is None:
        assert speed["min"] <= speed["median"] <= speed["max"] <= 4
        assert speed["min"] == pytest.approx(min(speed["ratios"]), abs=1e-6)
        assert "interleaved pairs" in out and "x faster than serial (median; min" in out
    else:  # a busy machine can still push one ratio above N: then no speed-up is reported at all
        assert speed["median"] is None and max(speed["ratios"]) > 4 and "speed-up not measured" in out
    assert speed["compared"] == "batched on 4 slots vs serial on 1 slot, the same 4 episodes, 5 interleaved pairs"
    head = json.loads((_spec_dir(tmp_path) / "run.json").read_text())["headline"]
    assert head["success_rate"] == pytest.approx(analysis["success"]["overall"]["success_rate"], abs=1e-6)
    assert head["success_ci95_low"] <= head["success_rate"] <= head["success_ci95_high"]
    assert head["episodes_per_s"] > 0
    # the analysis file rounds floats to 6 decimals; run.json keeps them whole
    for key in ("median", "max"):
        value = head[f"speedup_vs_serial_{key}"]
        assert value is None if speed[key] is None else value == pytest.approx(speed[key], abs=1e-6)


def test_ratio_above_n_is_a_measurement_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # a fake clock for the pair timings: every serial run "takes" 1000 ms, every batched run 10 ms (100x > N = 4)
    def readings() -> Iterator[int]:
        t = 0
        for duration in itertools.cycle([1_000_000_000, 10_000_000]):
            yield t  # a run starts
            t += duration
            yield t  # and ends

    clock = readings()

    def fake_now_ns() -> int:
        return next(clock)

    import lmmbench.episodes.speedup as speedup

    monkeypatch.setattr(speedup, "now_ns", fake_now_ns)
    assert main([*COMMON, "--warmup", "0", "--out-dir", str(tmp_path)]) == 0
    analysis: dict[str, Any] = json.loads((_spec_dir(tmp_path) / "episodic-eval_analysis.json").read_text())
    speed = analysis["speedup_vs_serial"]
    assert speed["ratios"] == [100.0] * 5
    assert speed["median"] is None and speed["min"] is None and speed["max"] is None
    assert "exceed N = 4" in speed["measurement_error"]
    assert "100.00x faster" not in analysis["finding"] and "speed-up not measured" in analysis["finding"]
    head = json.loads((_spec_dir(tmp_path) / "run.json").read_text())["headline"]
    assert head["speedup_vs_serial_median"] is None
    assert "faster than serial" not in capsys.readouterr().out
