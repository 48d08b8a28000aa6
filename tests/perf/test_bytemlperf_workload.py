"""A ByteMLPerf workload as its design says: the server's max batch, tp sizes that are real or said to be labels,
test_perf / test_accuracy, Min / Max New Tokens echoed, a server of the wrong model refused quickly."""

from __future__ import annotations

import csv
import json
import math
import socket
import sys
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.sessions.perf.workload import TP_LABEL_ONLY
from lmmbench.testing.fixtures import running_testserver, server_received, server_stats
from pacer import returns_before_pacer

# a server command that records its argv, then becomes lmmbench's test server with those arguments
_RECORDER = """import json, os, sys
with open(sys.argv[1], "a", encoding="utf-8") as fh:
    fh.write(json.dumps(sys.argv[2:]) + "\\n")
os.execv(sys.executable, [sys.executable, "-m", "lmmbench.cli.main", "testserver", *sys.argv[2:]])
"""


def _workload(tmp_path: Path, **keys: object) -> Path:
    data = {"model": "chatglm2-torch-fp16-6b", "test_accuracy": False, "test_perf": True, "min_new_tokens": 4,
            "max_new_tokens": 8, "tp_sizes": [1], "batch_sizes": [1], "input_tokens": [8],
            "dataset": "llm_perf/datasets/merged_52_test.csv", "perf_time": 0.3, **keys}  # fmt: skip
    path = tmp_path / "chatglm2-torch-fp16-6b.json"
    path.write_text(json.dumps(data))
    return path


def _report(out: Path) -> dict[str, object]:
    (run,) = list((out / "perf").iterdir())
    data: dict[str, object] = json.loads((run / "report.json").read_text())
    return data


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith(("[perf]", "waiting"))]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_server_cmd_starts_a_server_per_point_with_that_points_batch(tmp_path: Path) -> None:
    recorder, argv_log = tmp_path / "recorder.py", tmp_path / "argv.jsonl"
    recorder.write_text(_RECORDER)
    port = free_loopback_port()
    wl = _workload(tmp_path, tp_sizes=[1, 2], batch_sizes=[1, 4, 8])
    cmd = f"{sys.executable} {recorder} {argv_log} --port {{port}} --max-streams {{batch}} --ttft-ms 1 --itl-ms 1"
    assert main(["perf", "--url", f"http://127.0.0.1:{port}", "--model", "test-model", "--workload", str(wl),
                 "--server-cmd", cmd, "--no-plots", "--out-dir", str(tmp_path / "o")]) == 0  # fmt: skip
    started = [json.loads(x) for x in argv_log.read_text().splitlines()]
    # ByteMLPerf's launcher: a fresh server for every point, its --max_batch_size that point's batch
    assert [a[a.index("--max-streams") + 1] for a in started] == ["1", "4", "8", "1", "4", "8"]
    perf = _report(tmp_path / "o")["Performance"]
    assert isinstance(perf, list) and [(p["TP Size"], p["Batch Size"]) for p in perf] == [
        (1, 1), (1, 4), (1, 8), (2, 1), (2, 4), (2, 8)]  # fmt: skip


def test_several_tp_sizes_need_a_server_per_tp_or_tp_label_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wl = _workload(tmp_path, tp_sizes=[1, 2], batch_sizes=[1, 2])
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=1, itl_ms=1)) as url:
        base = ["perf", "--url", url, "--model", "test-model", "--workload", str(wl), "--no-plots"]
        assert main([*base, "--out-dir", str(tmp_path / "refused")]) == 2
        line = _one_line(capsys.readouterr().err)
        assert "tp_sizes [1, 2]" in line and "--server-cmd" in line and "--tp-label-only" in line
        assert server_stats(url)["requests"] == 0 and not (tmp_path / "refused").exists()
        assert main([*base, "--tp-label-only", "--out-dir", str(tmp_path / "o")]) == 0
    perf = _report(tmp_path / "o")["Performance"]
    assert isinstance(perf, list) and [p["TP Size"] for p in perf] == [1, 1, 2, 2]
    assert all(p["labels"]["tp_applied"] == TP_LABEL_ONLY for p in perf)
    (run,) = list((tmp_path / "o" / "perf").iterdir())
    rows = list(csv.DictReader((run / "summary.csv").open()))
    assert len(rows) == 4 and all(r["tp_applied"] == TP_LABEL_ONLY for r in rows)
    single = _workload(tmp_path, tp_sizes=[2])  # one tp size: nothing to say it is a label of
    assert main(["perf", "--url", url, "--workload", str(single), "--tp-label-only",
                 "--out-dir", str(tmp_path / "x")]) == 2  # fmt: skip
    assert "--tp-label-only" in _one_line(capsys.readouterr().err)


def test_min_and_max_new_tokens_echo_the_workload(tmp_path: Path) -> None:
    wl = _workload(tmp_path, min_new_tokens=3, max_new_tokens=6)
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=1, itl_ms=1)) as url:
        assert main(["perf", "--url", url, "--model", "test-model", "--workload", str(wl), "--no-plots",
                     "--out-dir", str(tmp_path / "o")]) == 0  # fmt: skip
        sent = server_received(url)
    report = _report(tmp_path / "o")
    assert (report["Min New Tokens"], report["Max New Tokens"]) == (3, 6)
    # the test server answers max_tokens every time, so an observed minimum would be 6, never 3
    load = [r["body"] for r in sent if r["body"].get("max_tokens") == 6]
    assert load and all(b["min_tokens"] == 3 for b in load)


def test_test_perf_false_sends_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = _workload(tmp_path, test_perf=False, test_accuracy=False)
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=1, itl_ms=1)) as url:
        assert main(["perf", "--url", url, "--model", "test-model", "--workload", str(wl),
                     "--out-dir", str(tmp_path / "o")]) == 2  # fmt: skip
        assert "nothing to run" in _one_line(capsys.readouterr().err)
        assert server_stats(url)["requests"] == 0 and server_received(url) == []


def test_a_started_server_of_another_model_fails_in_one_line_quickly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_loopback_port()
    wl = _workload(tmp_path)
    cmd = f"{sys.executable} -m lmmbench.cli.main testserver --port {{port}} --model other-model"
    argv = ["perf", "--url", f"http://127.0.0.1:{port}", "--model", "test-model", "--workload", str(wl),
            "--server-cmd", cmd, "--out-dir", str(tmp_path / "o")]  # fmt: skip
    # one line before a pacer of 30 fresh CLI imports finishes: the server's start (one import) and its models
    # list; waiting out the readiness timeout for a model that never comes would lose the race
    code, quickly = returns_before_pacer(lambda: main(argv), imports=30)
    assert code == 2 and quickly
    line = _one_line(capsys.readouterr().err)
    assert "test-model" in line and "other-model" in line
    with socket.socket() as s:  # the started server was stopped
        assert s.connect_ex(("127.0.0.1", port)) != 0


_REPORT_KEYS = ["Model", "Backend", "Host Info", "Version", "Execution Date", "Min New Tokens", "Max New Tokens",
                "Accuracy", "Performance"]
_PERF_KEYS = [
    "TP Size", "Batch Size", "Input Tokens", "First Token Latency(AVG)", "Per Token Latency(AVG)",
    "First Token Latency(P90)", "Per Token Latency(P90)", "Token Throughput", "Request Number", "QPS",
]  # fmt: skip


def test_report_json_is_bytemlperf_s_layout(tmp_path: Path) -> None:
    wl = _workload(tmp_path, batch_sizes=[2], input_tokens=[8, 16], min_new_tokens=5, max_new_tokens=5)
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=30, itl_ms=10)) as url:
        assert main(["perf", "--url", url, "--model", "test-model", "--workload", str(wl), "--no-plots",
                     "--out-dir", str(tmp_path / "o")]) == 0  # fmt: skip
    (run,) = list((tmp_path / "o" / "perf").iterdir())
    report = json.loads((run / "report.json").read_text())
    assert list(report)[: len(_REPORT_KEYS)] == _REPORT_KEYS  # ByteMLPerf's sections, one file, its order
    assert report["Model"] == "chatglm2-torch-fp16-6b"  # the task (the file's name), as ByteMLPerf's reporter
    assert report["Host Info"] and report["Accuracy"] is None  # not asked for
    assert report["lmmbench"]["served_model"] == "test-model"
    assert (report["Min New Tokens"], report["Max New Tokens"]) == (5, 5)
    perf = report["Performance"]
    assert [p["Input Tokens"] for p in perf] == [8, 16] and all(list(p)[:10] == _PERF_KEYS for p in perf)
    for p in perf:  # seconds, as ByteMLPerf reports: the server's injected 30 ms TTFT and 5 tokens 10 ms apart
        assert 0.029 < p["First Token Latency(AVG)"] < 0.5 and p["First Token Latency(P90)"] >= 0.029
        # per token latency: e2e / output tokens, first token included = (30 + 4 x 10) / 5 = 14 ms at least
        assert 0.0139 < p["Per Token Latency(AVG)"] < 0.5
        assert p["Batch Size"] == 2 and p["TP Size"] == 1 and p["Request Number"] > 0
    for name in ("records.jsonl", "records.csv", "summary.csv", "run.json"):  # lmmbench's own files beside it
        assert (run / name).is_file(), name


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a ByteMLPerf-style prompt CSV, a tiny-llm reference dumped from it)."""
    out = tmp_path_factory.mktemp("ref")
    dataset = out / "merged_test.csv"
    dataset.write_text("id,question,A,B,C,D\n" + "".join(f"{i},what is {i} times two,{i},{2 * i},1,0\n"
                                                         for i in range(5)))  # fmt: skip
    assert main(["reference", "dump", "--model", "tiny-llm", "--prompts", str(dataset), "--token-diff-prompts",
                 "2", "--max-new-tokens", "4", "--top-k", "3", "--threads", "1", "--out", str(out / "dump")]) == 0
    return dataset, out / "dump"


def test_test_accuracy_checks_the_server_under_test_into_report_json(tmp_path: Path,
                                                                     reference: tuple[Path, Path]) -> None:  # fmt: skip
    dataset, dump = reference
    wl = _workload(tmp_path, test_perf=False, test_accuracy=True, dataset=str(dataset))
    cfg = TestServerConfig(port=free_loopback_port(), model="tiny-llm", logprobs_reference=dump, logprob_shift=-0.5,
                           diverge_at_step=1)  # fmt: skip
    with running_testserver(cfg) as url:
        assert main(["perf", "--url", url, "--model", "tiny-llm", "--workload", str(wl), "--reference", str(dump),
                     "--no-plots", "--out-dir", str(tmp_path / "o")]) == 0  # fmt: skip
        sent = server_received(url)
    report = _report(tmp_path / "o")
    assert report["Performance"] is None  # test_perf: false
    acc = report["Accuracy"]
    assert isinstance(acc, dict) and acc["Logits Diff"] is None
    lp = acc["logprob_diff"]
    assert lp["k"] == 3 and lp["first_step"]["prompts"] == 5 and lp["first_step"]["max_abs_diff"] == pytest.approx(0.5)
    divergences = lp["per_step"]["first_divergence"]
    assert [(d["prompt"], d["step"]) for d in divergences] == [(0, 1), (1, 1)]
    assert all(d["generated"] != d["reference"] for d in divergences)  # ids, not masked as if secrets
    assert sent and all(r["body"]["logprobs"] for r in sent)  # accuracy requests only: no load, no probe
    # ByteMLPerf's PPL at step 0 scores the prompt alone, every log-prob shifted by -0.5 there: x exp(0.5); later
    # steps add the runner-up generated from step 1 on, so the whole is above exp(0.5) x the reference's
    assert all(p > r * math.exp(0.5) for p, r in zip(acc["PPL"], acc["Reference PPL"], strict=True))


def test_test_accuracy_needs_a_reference_of_the_workload_s_dataset(
    tmp_path: Path, reference: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    dataset, dump = reference
    other = tmp_path / "other.csv"
    other.write_text("id,question\n0,something else entirely\n")
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=1, itl_ms=1)) as url:
        base = ["perf", "--url", url, "--model", "test-model", "--out-dir", str(tmp_path / "o")]
        wl = _workload(tmp_path, test_accuracy=True, test_perf=False, dataset=str(dataset))
        assert main([*base, "--workload", str(wl)]) == 2
        assert "needs --reference" in _one_line(capsys.readouterr().err)
        wl = _workload(tmp_path, test_accuracy=True, dataset=str(other))
        assert main([*base, "--workload", str(wl), "--reference", str(dump)]) == 2
        assert "not the first 5" in _one_line(capsys.readouterr().err)
        wl = _workload(tmp_path, test_accuracy=False)
        assert main([*base, "--workload", str(wl), "--reference", str(dump)]) == 2
        assert "--reference" in _one_line(capsys.readouterr().err)
        assert server_stats(url)["requests"] == 0 and not (tmp_path / "o").exists()


def test_accuracy_runs_first_on_a_tp1_batch1_server(tmp_path: Path, reference: tuple[Path, Path]) -> None:
    dataset, dump = reference
    recorder, argv_log = tmp_path / "recorder.py", tmp_path / "argv.jsonl"
    recorder.write_text(_RECORDER)
    port = free_loopback_port()
    wl = _workload(tmp_path, test_accuracy=True, dataset=dataset.name, batch_sizes=[2, 4])
    (tmp_path / dataset.name).write_text(dataset.read_text())  # the dataset next to the workload, as ByteMLPerf's
    cmd = (f"{sys.executable} {recorder} {argv_log} --port {{port}} --tokens-per-chunk {{tp}} --max-streams {{batch}} "
           f"--model tiny-llm --logprobs-reference {dump} --ttft-ms 1 --itl-ms 1")  # fmt: skip
    assert main(["perf", "--url", f"http://127.0.0.1:{port}", "--model", "tiny-llm", "--workload", str(wl),
                 "--server-cmd", cmd, "--reference", str(dump), "--no-plots", "--out-dir", str(tmp_path / "o")]) == 0
    started = [json.loads(x) for x in argv_log.read_text().splitlines()]
    # the accuracy check's server (tp 1, batch 1) first, then one per point with its batch
    assert [(a[a.index("--tokens-per-chunk") + 1], a[a.index("--max-streams") + 1]) for a in started] == [
        ("1", "1"), ("1", "2"), ("1", "4")]  # fmt: skip
    report = _report(tmp_path / "o")
    perf, acc = report["Performance"], report["Accuracy"]
    assert isinstance(perf, list) and len(perf) == 2 and isinstance(acc, dict)
    assert acc["logprob_diff"]["first_step"]["max_abs_diff"] == pytest.approx(0.0, abs=1e-12)  # nothing injected
