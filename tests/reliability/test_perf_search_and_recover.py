"""perf search separates client-limited probes from server verdicts; perf recover turns the journal a
killed run left into summary, report.json and report.html."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.loadgen.search import CLIENT_LIMITED, search_max_load
from lmmbench.testing.fixtures import running_testserver


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=2, itl_ms=1)) as u:
        yield u


def test_a_client_limited_failure_bounding_the_answer_makes_the_verdict_client_limited() -> None:
    # the server would pass up to 300; the client cannot generate more than 120 (a pure probe function)
    res = search_max_load(lambda x: CLIENT_LIMITED if x > 120 else x <= 300, 10, 1000, 8)
    assert res.verdict == CLIENT_LIMITED and res.best is not None and res.best <= 120
    assert res.lowest_failing in res.client_limited and "client-limited" in res.describe("req/s")
    real = search_max_load(lambda x: x <= 80, 10, 1000, 8)  # a real failure below the client's limit
    assert real.verdict == "server-limited" and not real.client_limited


@pytest.mark.timeout(240)
def test_search_reruns_late_probes_and_reports_what_limited_it(url: str, tmp_path: Path) -> None:
    """Whatever this machine's load: a failing probe the client was late for is run again once; it is
    client-limited exactly when both attempts failed late; no failure is drawn from one late attempt."""
    assert main(["perf", "search", "--url", url, "--slo", "ttft_ms=2000", "--search-low", "5", "--search-high",
                 "20000", "--num-requests", "150", "--output-tokens", "2", "--search-iterations", "2",
                 "--no-plots", "--no-progress", "--out-dir", str(tmp_path), "--run-name", "s"]) == 0  # fmt: skip
    run = tmp_path / "perf" / "s"
    search = json.loads((run / "report.json").read_text())["search"]
    with (run / "summary.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    attempts: dict[float, list[dict[str, str]]] = {}
    for r in rows:
        attempts.setdefault(float(r["rate"]), []).append(r)
    for load, tries in attempts.items():
        late_fail = [float(t["lateness_ms_p99"]) > 1.0 and float(t["slo_attainment"]) < 0.9 for t in tries]
        assert len(tries) == (2 if late_fail[0] else 1), f"{load}: a late failure is run again once, only then"
        assert (load in search["client_limited"]) == all(late_fail)
    assert search["limited_by"] in ("client-limited", "server-limited", "no-failure", "no-pass")
    if search["limited_by"] == "client-limited":
        assert search["lowest_failing"] in search["client_limited"] and "client-limited" in search["verdict"]


@pytest.mark.timeout(180)
def test_recover_turns_the_journal_of_a_killed_run_into_metrics(tmp_path: Path) -> None:
    """SIGKILL mid-point (no handler runs), then `perf recover`: the injected TTFT / ITL and token
    counts come back from the journal alone; ITL (needs every chunk) is absent, not guessed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from lmmbench.loadgen.journal import JOURNAL_NAME, read_journal

    cfg = TestServerConfig(port=free_loopback_port(), ttft_ms=20, itl_ms=5)
    run = tmp_path / "perf" / "k"
    with running_testserver(cfg) as u:
        proc = subprocess.Popen([sys.executable, "-m", "lmmbench.cli.main", "perf", "--url", u, "--rate", "20",
                                 "--num-requests", "300", "--output-tokens", "8", "--no-plots", "--no-progress",
                                 "--out-dir", str(tmp_path), "--run-name", "k"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            while len(read_journal(run / JOURNAL_NAME)) < 20 and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        time.sleep(1.0)
    lines = read_journal(run / JOURNAL_NAME)
    assert len(lines) >= 20 and not (run / "summary.csv").exists()
    assert main(["perf", "recover", str(run)]) == 0
    with (run / "summary.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert int(row["requests"]) == int(row["ok"]) == len(lines)
    assert 20.0 <= float(row["ttft_send_ms_mean"]) < 20.0 + 15.0  # injected 20 ms, plus this busy machine
    assert float(row["output_tokens_mean"]) == 8.0 and float(row["tpot_ms_mean"]) >= 5.0 * 0.95
    assert row["itl_ms_mean"] in ("", "nan")
    report = json.loads((run / "report.json").read_text())
    assert report["recovered"] is True and report["recovered_requests"] == len(lines)
    assert (run / "report.html").is_file()
    assert json.loads((run / "run.json").read_text())["run"]["status"] == "recovered"
