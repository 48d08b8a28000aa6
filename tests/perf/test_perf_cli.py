"""`lmmbench perf` and `lmmbench testserver` end to end: files, ByteMLPerf keys, workloads, search, errors."""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import build_word_tokenizer, running_testserver

BYTEMLPERF_KEYS = {
    "TP Size", "Batch Size", "Input Tokens", "First Token Latency(AVG)", "Per Token Latency(AVG)",
    "First Token Latency(P90)", "Per Token Latency(P90)", "Token Throughput", "Request Number", "QPS",
}  # fmt: skip


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=5, itl_ms=1)) as u:
        yield u


def _run_dir(out: Path) -> Path:
    dirs = list((out / "perf").iterdir())
    assert len(dirs) == 1
    return dirs[0]


@pytest.mark.parametrize("with_tokenizer", [False, True])
def test_the_documented_command_works(url: str, tmp_path: Path, with_tokenizer: bool) -> None:
    argv = ["perf", "--url", url, "--model", "test-model", "--concurrency", "8", "--num-requests", "64",
            "--input-tokens", "128", "--output-tokens", "32", "--out-dir", str(tmp_path / "out")]  # fmt: skip
    if with_tokenizer:
        argv += ["--tokenizer", str(build_word_tokenizer(tmp_path / "tok"))]
    assert main(argv) == 0
    run = _run_dir(tmp_path / "out")
    for name in ("records.jsonl", "records.csv", "summary.csv", "report.json", "run.json"):
        assert (run / name).is_file(), name
    report = json.loads((run / "report.json").read_text())
    perf = report["Performance"]
    assert len(perf) == 1 and set(perf[0]) >= BYTEMLPERF_KEYS
    assert perf[0]["Request Number"] == 64 and perf[0]["Batch Size"] == 8 and perf[0]["Input Tokens"] == 128
    assert 0.004 < perf[0]["First Token Latency(AVG)"] < 0.5  # seconds, as ByteMLPerf reports
    lines = (run / "records.jsonl").read_text().splitlines()
    assert len(lines) == 64
    rec = json.loads(lines[0])
    assert rec["output_tokens"] == 32 and len(rec["chunk_ms"]) == 32
    assert rec["input_tokens"] == 128
    rows = list(csv.DictReader((run / "summary.csv").open()))
    assert len(rows) == 1 and float(rows[0]["ttft_ms_p99"]) > 0
    run_json = json.loads((run / "run.json").read_text())
    assert run_json["config"]["concurrency"] == 8 and "python" in run_json["environment"]


def test_bad_model_and_unreachable_server_fail_before_load(url: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["perf", "--url", url, "--model", "nope", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "model 'nope' is not served" in err and "Traceback" not in err
    assert main(["perf", "--url", f"http://127.0.0.1:{free_loopback_port()}", "--model", "m",
                 "--out-dir", str(tmp_path), "--wait-for-server", "0.5"]) == 2  # fmt: skip
    assert "cannot reach" in capsys.readouterr().err
    assert not (tmp_path / "perf").exists()
    assert main(["perf", "--url", url, "--slo", "latency=3", "--out-dir", str(tmp_path)]) == 2
    assert "unknown SLO" in capsys.readouterr().err


def test_yaml_workload_and_rate_sweep(url: str, tmp_path: Path) -> None:
    wl = tmp_path / "w.yaml"
    wl.write_text("model: test-model\noutput_tokens: 4\nnum_requests: 10\npoints:\n"
                  "  - {concurrency: 2}\n  - {rate: 50, input_tokens: 32}\n")  # fmt: skip
    assert main(["perf", "--url", url, "--workload", str(wl), "--out-dir", str(tmp_path / "o")]) == 0
    perf = json.loads((_run_dir(tmp_path / "o") / "report.json").read_text())["Performance"]
    assert [p["labels"]["concurrency"] for p in perf] == [2, None]
    assert perf[1]["labels"]["rate"] == 50 and perf[1]["Input Tokens"] == 32
    assert main(["perf", "--url", url, "--model", "test-model", "--rates", "20,40", "--num-requests", "8",
                 "--output-tokens", "2", "--out-dir", str(tmp_path / "s")]) == 0  # fmt: skip
    perf = json.loads((_run_dir(tmp_path / "s") / "report.json").read_text())["Performance"]
    assert [p["labels"]["rate"] for p in perf] == [20, 40]


def test_bytemlperf_workload_json_as_is(url: str, tmp_path: Path) -> None:
    wl = tmp_path / "chatglm2-torch-fp16-6b.json"
    wl.write_text(json.dumps({
        "model": "chatglm2-torch-fp16-6b", "test_accuracy": False, "test_perf": True, "min_new_tokens": 4,
        "max_new_tokens": 8, "tp_sizes": [1, 2], "batch_sizes": [1, 2], "input_tokens": [16],
        "dataset": "llm_perf/datasets/merged_52_test.csv", "perf_time": 0.5,
    }))  # fmt: skip
    argv = ["perf", "--url", url, "--model", "test-model", "--workload", str(wl), "--tp-label-only",
            "--out-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    perf = json.loads((_run_dir(tmp_path) / "report.json").read_text())["Performance"]
    assert [(p["TP Size"], p["Batch Size"], p["Input Tokens"]) for p in perf] == [
        (1, 1, 16), (1, 2, 16), (2, 1, 16), (2, 2, 16)]  # fmt: skip
    assert all(p["Request Number"] > 0 and p["QPS"] > 0 for p in perf)


def test_search_finds_the_saturation_point(tmp_path: Path) -> None:
    # 2 streams at a time, each ~5 + 7 x 2 ms: ~100 req/s before the queue (and TTFT) grows
    cfg = TestServerConfig(port=free_loopback_port(), ttft_ms=5, itl_ms=2, max_streams=2)
    with running_testserver(cfg) as u:
        argv = ["perf", "search", "--url", u, "--model", "test-model", "--output-tokens", "8",
                "--slo", "ttft_ms=40", "--search-low", "10", "--search-high", "400", "--search-iterations", "4",
                "--duration-s", "0.6", "--no-plots", "--out-dir", str(tmp_path)]  # fmt: skip
        assert main(argv) == 0
    report = json.loads((_run_dir(tmp_path) / "report.json").read_text())
    search = report["search"]
    assert search["best"] is not None and search["lowest_failing"] is not None
    assert 20 <= search["best"] <= 200 < 400
    reruns = sum(1 for p in report["Performance"] if p["labels"].get("attempt") == 2)  # late failures, again
    assert len(report["Performance"]) == len(search["probes"]) + reruns == 6 + reruns


def test_testserver_cli_serves_and_stops(tmp_path: Path) -> None:
    port = free_loopback_port()
    proc = subprocess.Popen([sys.executable, "-m", "lmmbench.cli.main", "testserver", "--port", str(port),
                             "--workers", "2", "--ttft-ms", "1"], stderr=subprocess.PIPE)  # fmt: skip
    try:
        import time
        import urllib.request

        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1) as r:
                    assert json.loads(r.read())["data"][0]["id"] == "test-model"
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("test server did not answer")
    finally:
        proc.terminate()
        assert proc.wait(10) is not None
        assert proc.stderr is not None
        proc.stderr.close()


def test_server_cmd_starts_and_stops_a_server_per_tp_size(tmp_path: Path) -> None:
    port = free_loopback_port()
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps({"model": "x", "min_new_tokens": 1, "max_new_tokens": 2, "tp_sizes": [1, 2],
                              "batch_sizes": [1], "input_tokens": [8], "perf_time": 0.3}))  # fmt: skip
    cmd = f"{sys.executable} -m lmmbench.cli.main testserver --port {{port}} --ttft-ms 1 --itl-ms 1"
    argv = ["perf", "--url", f"http://127.0.0.1:{port}", "--model", "test-model", "--workload", str(wl),
            "--server-cmd", cmd, "--no-plots", "--out-dir", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 0
    perf = json.loads((_run_dir(tmp_path / "o") / "report.json").read_text())["Performance"]
    assert [p["TP Size"] for p in perf] == [1, 2] and all(p["Request Number"] > 0 for p in perf)
    with socket.socket() as s:  # the server of the last tp size was stopped
        assert s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("command", ["perf", "testserver"])
def test_help_renders(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    assert "--url" in capsys.readouterr().out or command == "testserver"


def test_server_rejecting_ignore_eos_fails_before_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scfg = TestServerConfig(port=free_loopback_port(), ttft_ms=1, itl_ms=1, reject_ignore_eos=True)
    with running_testserver(scfg) as u:
        base = ["perf", "--url", u, "--model", "test-model", "--num-requests", "4", "--output-tokens", "2",
                "--no-plots", "--out-dir", str(tmp_path)]  # fmt: skip
        assert main(base) == 2
        assert "--no-ignore-eos" in capsys.readouterr().err
        assert main([*base, "--no-ignore-eos"]) == 0
