"""Each run against its previous one: a second perf run with the same name (another out-dir) shows its
change against the first in its report and on the console, with runs compare's verdicts; the first run
shows none; --baseline picks another run. Real runs against `lmmbench testserver`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver


def _perf(out: Path, ttft_ms: float, *extra: str) -> Path:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=ttft_ms, itl_ms=1)) as url:
        assert main(["perf", "--url", url, "--model", "test-model", "--concurrency", "2", "--num-requests", "60",
                     "--warmup-requests", "5", "--input-tokens", "16", "--output-tokens", "1", "--no-plots",
                     "--no-progress", "--out-dir", str(out), "--run-name", "nightly", *extra]) == 0  # fmt: skip
    return out / "perf" / "nightly"


def test_a_second_run_of_the_same_name_shows_its_change_in_its_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LMMBENCH_STORE_URL", f"sqlite:///{tmp_path / 'store.sqlite'}")
    first = _perf(tmp_path / "day1", 20)
    assert not (first / "comparison.json").exists()
    assert "Against the previous run" not in (first / "report.html").read_text()
    capsys.readouterr()
    second = _perf(tmp_path / "day2", 30)  # TTFT 20 -> 30 ms: slower, and a third less throughput
    err = capsys.readouterr().err
    first_id = json.loads((first / "run.json").read_text())["run_id"]
    assert f"[compare] against the previous run {first_id}:" in err and "regression: " in err
    data = json.loads((second / "comparison.json").read_text())
    assert data["baseline"]["run_id"] == first_id and data["regressions"] >= 2
    verdicts = {(m["metric"], m["statistic"]): m["verdict"] for m in data["metrics"]}
    assert verdicts[("ttft_ms", "mean")] == "regression" and verdicts[("qps", "mean")] == "regression"
    page = (second / "report.html").read_text()
    assert page.index("Against the previous run") < page.index("<h2>Charts</h2>")  # near the top
    assert first_id in page and "Change against the previous run" in page
    # --baseline: a third run compared with the first explicitly, although the second is newer
    third = _perf(tmp_path / "day3", 20, "--baseline", str(first))
    again = json.loads((third / "comparison.json").read_text())
    assert again["baseline"]["run_id"] == first_id and again["regressions"] == 0
