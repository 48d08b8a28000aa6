"""`lmmbench runs` on real perf runs against `lmmbench testserver`: the store lists them, `runs compare`
flags a TTFT of 26 ms against 20 ms (exit 1 with --fail-on-regression) and not two runs at 20 ms.

Every run has 100 measured requests after 10 warm-up ones and one output token, so TTFT is the
quantity under test (sub-millisecond inter-token gaps are noise on a shared machine)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.core.runs.store import RunStore
from lmmbench.sessions.runs_session import compare_runs
from lmmbench.testing import running_testserver


def _perf(out: Path, name: str, ttft_ms: float) -> Path:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=ttft_ms, itl_ms=1)) as url:
        assert main(["perf", "--url", url, "--model", "test-model", "--concurrency", "2", "--num-requests", "100",
                     "--warmup-requests", "10", "--input-tokens", "16", "--output-tokens", "1", "--no-plots",
                     "--no-progress", "--out-dir", str(out), "--run-name", name, "--labels", f"ttft={ttft_ms:g}"]) == 0
    return out / "perf" / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Three perf runs indexed in a store of their own: two at TTFT 20 ms, one at 26 ms."""
    root = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("LMMBENCH_STORE_URL", f"sqlite:///{root / 'store.sqlite'}")
    ids = {}
    for name, ttft in (("base", 20), ("slow", 26), ("again", 20)):
        folder = _perf(root / "out", name, ttft)
        ids[name] = json.loads((folder / "run.json").read_text())["run_id"]
    yield ids
    mp.undo()


def test_every_perf_run_is_indexed_with_its_run_log(runs: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    listed = RunStore.open().list(kind="perf")
    assert [r.run_id for r in listed] == [runs["again"], runs["slow"], runs["base"]]  # newest first
    slow = next(r for r in listed if r.run_id == runs["slow"])
    assert slow.ok == 100 and slow.failed == 0 and slow.labels == {"ttft": "26"} and slow.model == "test-model"
    assert 26 <= slow.headline["ttft_ms_p50"] < 200  # the injected delay is a floor
    log = json.loads((Path(slow.path) / "run.json").read_text())
    assert log["schema_version"] == 2 and log["measurement"]["send_timer"] == "closed-loop"
    assert log["measurement"]["event_loop"] in ("asyncio", "uvloop") and log["finished_at"]
    assert {"records.jsonl", "summary.csv", "report.html", "run.json"} <= set(log["files"])
    assert main(["runs", "list", "--label", "ttft=20"]) == 0
    out = capsys.readouterr().out
    assert runs["base"] in out and runs["again"] in out and runs["slow"] not in out
    assert main(["runs", "show", runs["slow"][:-1]]) == 0  # a unique prefix is enough
    assert "100 ok, 0 failed" in capsys.readouterr().out


def test_ttft_26_against_20_is_a_regression_and_fails_the_ci_gate(
    runs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    result = compare_runs([runs["base"]], [runs["slow"]])
    ttft = {m.statistic: m for group, m in result.metrics if m.metric == "ttft_ms"}
    assert ttft["mean"].verdict == "regression" and ttft["mean"].ci_low is not None and ttft["mean"].ci_low > 0
    assert ("config.labels.ttft", "20", "26") in result.config_diff  # differences are listed
    assert main(["runs", "compare", runs["base"], runs["slow"], "--fail-on-regression"]) == 1
    out = capsys.readouterr().out
    assert "regression" in out and "config.labels.ttft" in out
    assert main(["runs", "compare", runs["base"], runs["slow"]]) == 0  # without the gate: report only


def test_a_20_percent_capacity_drop_is_a_throughput_regression_on_its_own(
    runs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Two closed-loop clients and a TTFT of 26 instead of 20 ms: the server's capacity drops by about 23 %.
    QPS and output throughput get intervals from time windows of each run and are flagged; with the
    latency thresholds raised out of reach, the throughput drop alone fails the gate."""
    result = compare_runs([runs["base"]], [runs["slow"]])
    flagged = {m.metric: m for _, m in result.metrics if m.metric in ("qps", "output_token_throughput")}
    assert set(flagged) == {"qps", "output_token_throughput"}
    for m in flagged.values():
        assert m.verdict == "regression" and m.ci_high is not None and m.ci_high < 0 and -30 < m.change < -15
    summaries = {n: _summary_qps(runs, n) for n in ("base", "slow")}
    assert flagged["qps"].a == pytest.approx(summaries["base"]) and flagged["qps"].b == pytest.approx(summaries["slow"])
    errors = next(m for _, m in result.metrics if m.metric == "error_rate")
    assert errors.verdict == "unchanged" and errors.unit == "pt" and errors.a == errors.b == 0.0
    gate = ["runs", "compare", runs["base"], runs["slow"], "--fail-on-regression", "--threshold",
            "ttft_ms=1000,e2e_ms=1000,tpot_ms=1000,itl_mean_ms=1000"]  # fmt: skip
    assert main(gate) == 1
    out = capsys.readouterr().out
    assert "qps" in out and "regression" in out


def _summary_qps(runs: dict[str, str], name: str) -> float:
    import csv

    folder = Path(RunStore.open().get(runs[name]).path)
    return float(next(csv.DictReader((folder / "summary.csv").open()))["qps"])


def test_identical_settings_are_not_flagged(runs: dict[str, str]) -> None:
    assert main(["runs", "compare", runs["base"], runs["again"], "--fail-on-regression"]) == 0
    result = compare_runs([runs["base"]], [runs["again"]])
    assert not result.regressions and not result.improvements
    qps = next(m for _, m in result.metrics if m.metric == "qps")
    assert qps.ci_low is not None and qps.ci_high is not None  # throughput has an interval now
    assert result.config_diff == [] or all(k in ("config.url",) for k, _, _ in result.config_diff)


def test_pooled_sides_with_separator(runs: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "compare", runs["base"], runs["again"], "--", runs["slow"], "--fail-on-regression"]) == 1
    out = capsys.readouterr().out
    assert f"A (baseline): {runs['base']}, {runs['again']}" in out
    assert main(["runs", "compare", runs["base"], "--", "--fail-on-regression"]) == 2  # an empty side
    assert "both sides" in capsys.readouterr().err


def test_a_threshold_on_no_metric_of_the_runs_is_refused(runs: dict[str, str],
                                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """--threshold nosuch_metric=5 was ignored: now one line naming it and the metrics there are, exit 2."""
    assert main(["runs", "compare", runs["base"], runs["slow"], "--threshold", "nosuch_metric=5"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--threshold nosuch_metric: no metric of that name in these runs" in line and "ttft_ms" in line, line
