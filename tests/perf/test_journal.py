"""Finished requests reach disk while the load point is still running (records.partial.jsonl)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.loadgen.journal import JOURNAL_NAME, read_journal
from lmmbench.testing import running_testserver

TTFT_MS, ITL_MS, OUT_TOKENS = 20.0, 10.0, 20  # each request takes ~210 ms on the server


@pytest.fixture(scope="module")
def slow_url() -> Iterator[str]:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=TTFT_MS, itl_ms=ITL_MS)) as u:
        yield u


def _perf_argv(url: str, out: Path, rate: float, n: int, workers: int = 1) -> list[str]:
    return ["perf", "--url", url, "--model", "test-model", "--rate", str(rate), "--num-requests", str(n),
            "--input-tokens", "16", "--output-tokens", str(OUT_TOKENS), "--workers", str(workers),
            "--out-dir", str(out), "--run-name", "j", "--no-plots"]  # fmt: skip


@pytest.mark.parametrize("workers", [1, 2])
def test_finished_requests_are_on_disk_before_the_point_ends_and_survive_sigkill(
    slow_url: str, tmp_path: Path, workers: int
) -> None:
    run = tmp_path / "perf" / "j"
    # 200 requests at 20/s: the point lasts ~10 s; we kill it after a few seconds
    proc = subprocess.Popen([sys.executable, "-m", "lmmbench.cli.main",
                             *_perf_argv(slow_url, tmp_path, 20, 200, workers)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        lines: list[dict[str, object]] = []
        while time.monotonic() < deadline and proc.poll() is None:
            lines = read_journal(run / JOURNAL_NAME)
            if len(lines) >= 20:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the point ended before the journal was checked"
        assert len(lines) >= 20, f"only {len(lines)} finished requests on disk during the point"
        assert not (run / "records.jsonl").exists() or not (run / "records.jsonl").read_text()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)  # a crash: no handler, no cleanup
        proc.wait(10)
        if proc.stderr:
            proc.stderr.close()
    size = -1
    killed_at, stable_since = time.monotonic(), time.monotonic()
    while time.monotonic() - stable_since < 1.5:  # load workers end with their parent: the file stops growing
        time.sleep(0.1)
        now_size = (run / JOURNAL_NAME).stat().st_size
        if now_size != size:
            size, stable_since = now_size, time.monotonic()
    assert stable_since - killed_at < 3.0, "load workers outlived their killed parent"
    lines = read_journal(run / JOURNAL_NAME)
    assert len(lines) >= 20
    ids = [int(str(x["request_id"])) for x in lines]
    assert len(set(ids)) == len(ids)  # every finished request once, never twice
    assert {int(str(x["worker"])) for x in lines} == set(range(workers))
    for x in lines:
        assert x["status"] == 200 and x["error_kind"] == "" and x["partial"] is True
        assert x["labels"]["rate"] == 20 and x["labels"]["point"] == 0  # type: ignore[index]
        sched, sent, first, end = (int(str(x[k])) for k in ("scheduled_ns", "sent_ns", "first_byte_ns", "end_ns"))
        assert 0 < sched <= sent < first < end
        # injected ground truth: the last token comes TTFT + (n-1) ITL after the send
        first_ev, last_ev = int(str(x["first_event_ns"])), int(str(x["last_event_ns"]))
        assert int(str(x["events"])) >= OUT_TOKENS
        assert sent <= first_ev < last_ev <= end  # (the first event is the role chunk, sent at once)
        assert last_ev - sent >= (TTFT_MS + (OUT_TOKENS - 1) * ITL_MS) * 0.95e6
        assert float(str(x["e2e_ms"])) >= TTFT_MS + (OUT_TOKENS - 1) * ITL_MS * 0.95
    if workers == 2:  # the same run folder again: refused, then with --overwrite the journal is kept aside
        crashed = (run / JOURNAL_NAME).read_text()
        assert main(_perf_argv(slow_url, tmp_path, 50, 10)) == 2
        assert main([*_perf_argv(slow_url, tmp_path, 50, 10), "--overwrite"]) == 0
        kept = list(run.glob("records.partial.crashed-*.jsonl"))
        assert len(kept) == 1 and kept[0].read_text() == crashed and not (run / JOURNAL_NAME).exists()


def test_a_finished_point_removes_the_journal(slow_url: str, tmp_path: Path) -> None:
    assert main(_perf_argv(slow_url, tmp_path, 50, 20)) == 0
    run = tmp_path / "perf" / "j"
    assert not (run / JOURNAL_NAME).exists()
    assert len((run / "records.jsonl").read_text().splitlines()) == 20
