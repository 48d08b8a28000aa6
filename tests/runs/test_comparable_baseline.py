"""A run is compared automatically only with an earlier run of the same workload (its fingerprint: docs/runs.md):
an unrelated run of the same name gives "no comparable earlier run (the newest of this name differs in: ...)" and
no regression count; an explicit --baseline compares anyway and says what differs first; a comparison that
compared no metric prints no count. Episodic runs with another number of slots or another environment are not
compared. Real perf runs against `lmmbench testserver`, real episodic runs of the toy suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.core.runs.log import RunLog
from lmmbench.sessions.previous_run import _lines, _payload
from lmmbench.sessions.runs_session import ResolvedRun, RunComparison
from lmmbench.testing import running_testserver


def _perf(out: Path, *extra: str) -> Path:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=5, itl_ms=1)) as url:
        assert main(["perf", "--url", url, "--model", "test-model", "--concurrency", "2", "--num-requests", "20",
                     "--output-tokens", "1", "--no-plots", "--no-progress", "--out-dir", str(out),
                     "--run-name", "nightly", *extra]) == 0  # fmt: skip
    return out / "perf" / "nightly"


def test_an_unrelated_run_of_the_same_name_is_not_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LMMBENCH_STORE_URL", f"sqlite:///{tmp_path / 'store.sqlite'}")
    first = _perf(tmp_path / "day1", "--input-tokens", "64")
    fingerprint = json.loads((first / "run.json").read_text())["run"]["workload_fingerprint"]
    assert fingerprint["fields"]["input_tokens"] == 64 and fingerprint["fields"]["model"] == "test-model"
    first_id = json.loads((first / "run.json").read_text())["run_id"]
    capsys.readouterr()
    second = _perf(tmp_path / "day2", "--input-tokens", "16", "--seed", "3")  # another workload, the same name
    err = capsys.readouterr().err
    assert f"[compare] no comparable earlier run (the newest of this name, {first_id}, differs in: " in err
    assert "input_tokens: 64 -> 16" in err and "seed: 0 -> 3" in err
    assert "regression(s)" not in err and "regression:" not in err
    data = json.loads((second / "comparison.json").read_text())
    assert data["baseline"] is None and data["regressions"] is None and data["metrics"] == []
    page = (second / "report.html").read_text()
    assert "No comparable earlier run" in page and "regression(s)" not in page
    # `runs compare` of the two: they share no load point, so nothing is compared and no count is printed
    assert main(["runs", "compare", str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert "no metric compared (the runs share no measured metric)" in out and "regression(s)" not in out
    # --baseline compares anyway, and says first what differs
    third = _perf(tmp_path / "day3", "--input-tokens", "64", "--seed", "3", "--baseline", str(first))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[compare]")]
    assert lines[0] == f"[compare] the baseline {first_id} measured another workload; it differs in: seed: 0 -> 3"
    assert lines[1].startswith(f"[compare] against the baseline {first_id}: ") and "metric(s) compared" in lines[1]
    again = json.loads((third / "comparison.json").read_text())
    assert again["baseline"]["run_id"] == first_id and again["metrics_compared"] > 0
    assert again["workload_differences"] == ["seed: 0 -> 3"]


def test_the_newest_comparable_run_is_the_baseline_past_an_unrelated_newer_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LMMBENCH_STORE_URL", f"sqlite:///{tmp_path / 'store.sqlite'}")
    first = _perf(tmp_path / "day1")
    _perf(tmp_path / "day2", "--input-tokens", "16")  # unrelated, newer
    capsys.readouterr()
    _perf(tmp_path / "day3")  # the same workload as day1: compared with it, as runs are today
    first_id = json.loads((first / "run.json").read_text())["run_id"]
    err = capsys.readouterr().err
    assert f"[compare] against the previous run {first_id}: " in err and "metric(s) compared" in err
    assert "measured another workload" not in err


def _resolved(tmp_path: Path) -> ResolvedRun:
    log = RunLog(run_id="perf-x", kind="perf", name="nightly", started_at="2026-01-01T00:00:00Z")
    return ResolvedRun(stored=None, run_log=log, folder=tmp_path)  # type: ignore[arg-type]


def test_a_comparison_that_compared_no_metric_counts_no_regression(tmp_path: Path) -> None:
    result = RunComparison(side_a=[], side_b=[])  # the runs shared no metric
    payload = _payload(result, _resolved(tmp_path), [], explicit=False)
    lines = _lines(payload)
    assert payload["regressions"] is None and payload["metrics_compared"] == 0
    assert lines == ["against the previous run perf-x: no metric compared (the two runs share no measured metric)"]


def _episodic(out: Path, *extra: str) -> None:
    assert main(["run", "episodic-eval", "--num-tasks", "2", "--num-trials-per-task", "1", "--max-steps", "6",
                 "--warmup", "0", "--no-progress", "--out-dir", str(out), *extra]) == 0  # fmt: skip


def test_episodic_runs_with_another_number_of_slots_are_not_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LMMBENCH_STORE_URL", f"sqlite:///{tmp_path / 'store.sqlite'}")
    _episodic(tmp_path / "a", "--num-parallel", "2")
    run = json.loads((tmp_path / "a" / "episodic-eval" / "run.json").read_text())
    fields = run["run"]["workload_fingerprint"]["fields"]
    assert fields["slots_ran"] == 2 and fields["env"] == "toy-waypoints" and fields["spec"] == "episodic-eval"
    capsys.readouterr()
    _episodic(tmp_path / "b", "--num-parallel", "1")  # serial: per-episode wall time is another quantity
    err = capsys.readouterr().err
    assert "[compare] no comparable earlier run" in err and "slots_ran: 2 -> 1" in err
    assert "regression" not in err
