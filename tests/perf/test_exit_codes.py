"""`lmmbench perf` exits 2 (nothing measured) with one line when no request succeeded; with some requests failed it
exits 0 (failed requests are part of a load test's measurement: its error rate) and prints the failure count
(docs/reliability.md). Faults are the test server's injected ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver


def _perf(url: str, out: Path) -> int:
    return main(["perf", "--url", url, "--model", "test-model", "--concurrency", "4", "--num-requests", "12",
                 "--input-tokens", "16", "--output-tokens", "4", "--out-dir", str(out), "--no-plots"])


def test_no_successful_request_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # error_event: a 200 stream carrying an error (the pre-flight accepts the status; every request fails)
    cfg = TestServerConfig(port=free_loopback_port(), ttft_ms=2, itl_ms=1, faults={"error_event": 1.0})
    with running_testserver(cfg) as url:
        assert _perf(url, tmp_path) == 2
    err = capsys.readouterr().err
    assert "error: no request succeeded (12 sent)" in err


def test_partial_success_exits_0_and_counts_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = TestServerConfig(port=free_loopback_port(), ttft_ms=2, itl_ms=1, faults={"http_500": 0.5})
    with running_testserver(cfg) as url:
        assert _perf(url, tmp_path) == 0
    err = capsys.readouterr().err
    assert "6 of 12 request(s) failed" in err
