"""ByteMLPerf's LLM benchmark as its launcher (``byte_infer_perf/llm_perf/launch.py``) runs it today: its current
workload files (copies in tests/perf/fixtures/bytemlperf, origin in its README), a workload by bare name, a fresh
server per point and for the accuracy run (accuracy first), tp sizes below ``min_tp_size`` skipped, overrides
from the command line, and report.json's top as its reporter (``llm_perf/utils/reporter.py``) writes it."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.config.perf.workload_file import (
    bytemlperf_root,
    bytemlperf_version,
    bytemlperf_workload,
    dataset_path,
    find_workload,
    load_workload,
)
from lmmbench.core.errors import UserError
from lmmbench.core.net import free_loopback_port
from lmmbench.sessions.perf.workload import SERVER_PER_TP
from lmmbench.testing.fixtures import running_testserver, server_received, server_stats

FIXTURE = Path(__file__).parent / "fixtures" / "bytemlperf"
WORKLOADS = FIXTURE / "byte_infer_perf" / "llm_perf" / "workloads"

# a server command that records its argv, then becomes lmmbench's test server with those arguments
_RECORDER = """import json, os, sys
with open(sys.argv[1], "a", encoding="utf-8") as fh:
    fh.write(json.dumps(sys.argv[2:]) + "\\n")
os.execv(sys.executable, [sys.executable, "-m", "lmmbench.cli.main", "testserver", *sys.argv[2:]])
"""


def _nested(tmp_path: Path, name: str = "tiny-torch-fp32-1m", **perf: Any) -> Path:
    """A workload in today's nested layout, shortened (its perf_time and sizes) so that a test runs it quickly."""
    top = {k: perf.pop(k) for k in ("test_accuracy", "test_perf", "min_tp_size", "model", "dataset",
                                           "max_new_tokens") if k in perf}
    data = {"model": top.get("model", "test-model"), "test_accuracy": top.get("test_accuracy", False),
            "min_tp_size": top.get("min_tp_size", 1),
            "accuracy_config": {"dataset": top.get("dataset", "merged_test.csv"), "min_new_tokens": 1,
                                "max_new_tokens": top.get("max_new_tokens", 3)},
            "test_perf": top.get("test_perf", True),
            "perf_config": {"tp_sizes": [1], "batch_sizes": [2], "input_tokens": [8], "output_tokens": 4,
                            "perf_time": 0.3, **perf}}  # fmt: skip
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data, indent=4))
    return path


def _run_dir(out: Path) -> Path:
    (run,) = list((out / "perf").iterdir())
    return run


def _report(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((_run_dir(out) / "report.json").read_text())
    return data


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith(("[perf]", "waiting"))]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --- the files as ByteMLPerf ships them ---------------------------------------------------------------------


def test_todays_workload_files_load_as_the_launcher_reads_them() -> None:
    # values read by hand from the four files (tests/perf/fixtures/bytemlperf)
    chatglm = bytemlperf_workload(WORKLOADS / "chatglm2-torch-fp16-6b.json")
    assert chatglm is not None and chatglm.layout == "nested" and chatglm.task == "chatglm2-torch-fp16-6b"
    assert (chatglm.model, chatglm.min_tp_size, chatglm.test_accuracy, chatglm.test_perf) == ("chatglm2-6b", 1, True,
                                                                                              True)  # fmt: skip
    assert chatglm.perf_tp_sizes == [1, 2, 4, 8] and chatglm.output_tokens == 200 and chatglm.perf_time == 100.0
    assert (chatglm.min_new_tokens, chatglm.max_new_tokens) == (1, 512)
    for name, model, test_accuracy in (("llama3-torch-bf16-70b", "llama3-70b", True),
                                       ("falcon-torch-bf16-180b", "falcon-180b", False),
                                       ("mixtral-torch-bf16-8x22b", "mixtral-8x22b", False)):  # fmt: skip
        wl = bytemlperf_workload(WORKLOADS / f"{name}.json")
        assert wl is not None and wl.model == model and wl.test_accuracy is test_accuracy
        assert wl.perf_tp_sizes == [8] and wl.accuracy_tp == 8  # min_tp_size 8: tp 1, 2, 4 are skipped
        base, points = load_workload(WORKLOADS / f"{name}.json")
        assert base["labels"]["workload"] == name
        # 1 tp size x 6 batch sizes x 2 input lengths, each perf_time 100 s of exactly output_tokens 200
        assert len(points) == 12 and {p["labels"]["tp"] for p in points} == {8}
        assert [(p["concurrency"], p["input_tokens"]) for p in points[:3]] == [(1, 1024), (1, 2048), (4, 1024)]
        assert all(p["output_tokens"] == 200 and p["ignore_eos"] and p["duration_s"] == 100.0 for p in points)


def test_a_bare_name_is_found_as_the_launcher_finds_its_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.chdir(FIXTURE)  # ByteMLPerf's checkout: byte_infer_perf/llm_perf/workloads under it
    found = find_workload(Path("llama3-torch-bf16-70b"))
    assert found.resolve() == (WORKLOADS / "llama3-torch-bf16-70b.json").resolve()
    monkeypatch.chdir(FIXTURE / "byte_infer_perf")  # where the launcher runs (it chdirs to byte_infer_perf)
    assert find_workload(Path("falcon-torch-bf16-180b")).resolve() == (WORKLOADS / "falcon-torch-bf16-180b.json"
                                                                       ).resolve()  # fmt: skip
    own = tmp_path / "mine"
    own.mkdir()
    shutil.copy(WORKLOADS / "falcon-torch-bf16-180b.json", own / "falcon-torch-bf16-180b.json")
    assert find_workload(Path("falcon-torch-bf16-180b"), own) == own / "falcon-torch-bf16-180b.json"
    with pytest.raises(UserError, match=r"no file nope\.json in .*mine"):
        find_workload(Path("nope"), own)
    # through the command line: --workloads-dir is where the name is looked up, before anything is asked
    code = main(["perf", "--workload", "falcon-torch-bf16-180b", "--workloads-dir", str(own), "--url",
                 "http://127.0.0.1:9", "--server-per-tp", "--out-dir", str(tmp_path / "o")])  # fmt: skip
    assert code == 2  # found in own/ (a ByteMLPerf workload), then --server-per-tp without --server-cmd refused
    assert "--server-per-tp: only with --server-cmd" in capsys.readouterr().err
    assert main(["perf", "--workload", "nope", "--workloads-dir", str(own), "--url", "http://127.0.0.1:9",
                 "--out-dir", str(tmp_path / "o")]) == 2  # fmt: skip
    assert "no file nope.json in " + str(own) in capsys.readouterr().err
    # the dataset resolves against the ByteMLPerf root the file sits under; ByteMLPerf's version from ../VERSION
    wl = bytemlperf_workload(WORKLOADS / "chatglm2-torch-fp16-6b.json")
    assert wl is not None and bytemlperf_root(wl.path) == (FIXTURE / "byte_infer_perf").resolve()
    assert dataset_path(wl).name == "merged_52_test.csv" and dataset_path(wl).is_file()
    assert bytemlperf_version(bytemlperf_root(wl.path)) == "1.0.0"  # major=1 / minor=0 / patch=0
    copy = tmp_path / "chatglm2-torch-fp16-6b.json"  # elsewhere: beside the file, else a one-line refusal
    shutil.copy(wl.path, copy)
    wl2 = bytemlperf_workload(copy)
    assert wl2 is not None and bytemlperf_version(bytemlperf_root(copy)) is None
    with pytest.raises(UserError, match=r"dataset 'llm_perf/datasets/merged_52_test\.csv' not found"):
        dataset_path(wl2)


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d["perf_config"].update(perf_time=True), "'perf_config.perf_time' must be a positive number"),
    (lambda d: d["perf_config"].update(batch_sizes=8), "'perf_config.batch_sizes' must be a non-empty list"),
    (lambda d: d["perf_config"].update(batch_sizes=[1, True]), "'perf_config.batch_sizes[1]' must be an integer"),
    (lambda d: d["perf_config"].pop("perf_time"), "'perf_config.perf_time' is missing"),
    (lambda d: d["perf_config"].update(batch_size=d["perf_config"].pop("batch_sizes")),
     "unknown field(s) 'batch_size' (did you mean 'batch_sizes'?)"),
    (lambda d: d.update(tp_sizes=[1]), "top level: unknown field(s) 'tp_sizes'"),
    (lambda d: d.pop("min_tp_size"), "'min_tp_size' is missing"),
    (lambda d: d.update(test_perf=1), "'test_perf' must be true or false"),
])  # fmt: skip
def test_each_bad_field_is_named_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any,
                                             needle: str) -> None:  # fmt: skip
    data = json.loads((WORKLOADS / "falcon-torch-bf16-180b.json").read_text())
    edit(data)
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    assert main(["perf", "--workload", str(path), "--url", "http://127.0.0.1:9", "--out-dir", str(tmp_path / "o")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert needle in line and str(path) in line
    if "unknown" in needle:  # only the unknown key is named as unknown, never the correct ones beside it
        assert "'perf_time'" not in line.split("; known:")[0] and "'model'" not in line.split("; known:")[0]


def test_json_numbers_are_json_numbers(tmp_path: Path) -> None:
    text = (WORKLOADS / "falcon-torch-bf16-180b.json").read_text().replace('"perf_time": 100', '"perf_time": 1e0')
    text = text.replace('"output_tokens": 200', '"output_tokens": 2e2')
    path = tmp_path / "w.json"
    path.write_text(text)
    wl = bytemlperf_workload(path)
    assert wl is not None and wl.perf_time == 1.0 and wl.output_tokens == 200  # 1e0 and 2e2 are JSON numbers
    path.write_text(text.replace('"perf_time": 1e0', '"perf_time": 1e-09'))
    wl = bytemlperf_workload(path)
    assert wl is not None and wl.perf_time == 1e-09
    path.write_text(text.replace('"perf_time": 1e0', '"perf_time": NaN'))
    with pytest.raises(UserError, match="NaN is not a JSON number"):
        bytemlperf_workload(path)


# --- servers as the launcher starts them ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a ByteMLPerf-style prompt CSV, a tiny-llm reference dumped from it)."""
    out = tmp_path_factory.mktemp("ref")
    dataset = out / "merged_test.csv"
    dataset.write_text("id,question,A,B,C,D\n0,what is two times two,2,4,1,0\n1,name a colour,red,one,two,dog\n")
    assert main(["reference", "dump", "--model", "tiny-llm", "--prompts", str(dataset), "--token-diff-prompts",
                 "2", "--max-new-tokens", "3", "--top-k", "3", "--threads", "1", "--out", str(out / "dump")]) == 0
    return dataset, out / "dump"


def _starts(tmp_path: Path, reference: tuple[Path, Path], *extra: str) -> tuple[list[tuple[str, str]], dict[str, Any],
                                                                                Path]:  # fmt: skip
    dataset, dump = reference
    recorder, argv_log = tmp_path / "recorder.py", tmp_path / "argv.jsonl"
    recorder.write_text(_RECORDER)
    shutil.copy(dataset, tmp_path / "merged_test.csv")  # beside the workload: found there
    wl = _nested(tmp_path, test_accuracy=True, min_tp_size=2, model="tiny-llm", tp_sizes=[1, 2, 4],
                 batch_sizes=[1, 3], perf_time=0.2)  # fmt: skip
    cmd = (f"{sys.executable} {recorder} {argv_log} --port {{port}} --tokens-per-chunk {{tp}} --max-streams {{batch}} "
           f"--model tiny-llm --logprobs-reference {dump} --ttft-ms 1 --itl-ms 1")  # fmt: skip
    out = tmp_path / "o"
    assert main(["perf", "--url", f"http://127.0.0.1:{free_loopback_port()}", "--workload", str(wl), "--server-cmd",
                 cmd, "--reference", str(dump), "--no-plots", "--out-dir", str(out), *extra]) == 0  # fmt: skip
    started = [json.loads(x) for x in argv_log.read_text().splitlines()]
    return [(a[a.index("--tokens-per-chunk") + 1], a[a.index("--max-streams") + 1]) for a in started], _report(out), out


def test_a_fresh_server_per_point_accuracy_first_tp_below_min_tp_size_skipped(tmp_path: Path,
                                                                             reference: tuple[Path, Path]) -> None:
    starts, report, _out = _starts(tmp_path, reference)
    # (tp, batch) of every start, in order: accuracy at min_tp_size 2 and batch 1, then one per point; tp 1 absent
    assert starts == [("2", "1"), ("2", "1"), ("2", "3"), ("4", "1"), ("4", "3")]
    assert isinstance(report["Accuracy"], dict)
    assert [(p["TP Size"], p["Batch Size"]) for p in report["Performance"]] == [(2, 1), (2, 3), (4, 1), (4, 3)]
    assert report["lmmbench"]["servers"].startswith("a fresh server per point")


def test_server_per_tp_keeps_one_server_per_tp_and_says_so(tmp_path: Path, reference: tuple[Path, Path]) -> None:
    starts, report, out = _starts(tmp_path, reference, "--server-per-tp")
    assert starts == [("2", "1"), ("2", "3"), ("4", "3")]  # accuracy, then one per tp sized for its largest batch
    assert report["lmmbench"]["servers"] == SERVER_PER_TP
    run_log = json.loads((_run_dir(out) / "run.json").read_text())
    assert run_log["run"]["servers"] == SERVER_PER_TP


# --- options beside a workload -------------------------------------------------------------------------------


def _max_overlap(run: Path) -> int:
    spans = [(r["sent_ns"], r["end_ns"]) for r in map(json.loads, (run / "records.jsonl").read_text().splitlines())]
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


@pytest.mark.parametrize("option, value", [("--concurrency", "1"), ("--input-tokens", "40"),
                                           ("--output-tokens", "2"), ("--duration-s", "0.6")])  # fmt: skip
def test_each_override_replaces_the_workloads_value_and_says_so(tmp_path: Path, option: str, value: str) -> None:
    wl = _nested(tmp_path, batch_sizes=[3], input_tokens=[8], output_tokens=4, perf_time=0.3)
    key = option.removeprefix("--").replace("-", "_")
    workload_value = {"concurrency": 3, "input_tokens": 8, "output_tokens": 4, "duration_s": 0.3}[key]
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=5, itl_ms=5)) as url:
        assert main(["perf", "--url", url, "--model", "test-model", "--workload", str(wl), "--no-plots",
                     "--out-dir", str(tmp_path / "o"), option, value]) == 0  # fmt: skip
        sent = [r["body"] for r in server_received(url) if r["body"].get("max_tokens") != 1]
    run = _run_dir(tmp_path / "o")
    (entry,) = _report(tmp_path / "o")["Performance"]
    assert entry["labels"]["overridden"] == {key: {"workload": workload_value, "option": json.loads(value)}}
    summary = (run / "summary.csv").read_text()
    assert "overridden" in summary.splitlines()[0]
    if key == "concurrency":
        assert _max_overlap(run) == 1 and entry["Batch Size"] == 1  # clients that ran, as ByteMLPerf's Batch Size
    elif key == "input_tokens":
        records = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
        # the server's own count of the prompt (words here): 40 asked, where the workload's 8 would stay below 30
        assert entry["Input Tokens"] == 40 and records and all(r["prompt_tokens"] >= 30 for r in records)
    elif key == "output_tokens":  # after the pre-flight probe, every load request asks for 2 tokens, not 4
        assert len(sent) > 1 and all(b["max_tokens"] == 2 for b in sent[1:])
    else:
        records = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
        span_s = (max(r["end_ns"] for r in records) - min(r["sent_ns"] for r in records)) / 1e9
        assert span_s > 0.45  # 0.6 s of load, where the workload's 0.3 s would have ended before 0.45 s


@pytest.mark.parametrize("option", [["--concurrencies", "2"], ["--rates", "50"], ["--rate", "5"],
                                    ["--num-requests", "3"]])  # fmt: skip
def test_sweeps_beside_a_workload_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              option: list[str]) -> None:  # fmt: skip
    wl = _nested(tmp_path, batch_sizes=[1, 4])
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=1, itl_ms=1)) as url:
        assert main(["perf", "--url", url, "--model", "test-model", "--workload", str(wl), *option,
                     "--out-dir", str(tmp_path / "o")]) == 2  # fmt: skip
        assert server_stats(url)["requests"] == 0
    line = _one_line(capsys.readouterr().err)
    assert line.removeprefix("error: ").startswith(option[0]) and "ByteMLPerf" in line and not (tmp_path / "o").exists()


# --- report.json as ByteMLPerf's reporter writes it --------------------------------------------------------------


_TOP = ["Model", "Backend", "Host Info", "Version", "Execution Date", "Min New Tokens", "Max New Tokens", "Accuracy",
        "Performance"]  # the reporter's result template, in its order  # fmt: skip


def test_report_top_means_what_bytemlperfs_reporter_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ByteMLPerf"
    shutil.copytree(FIXTURE, root)
    monkeypatch.chdir(root / "byte_infer_perf")
    text = (WORKLOADS / "llama3-torch-bf16-70b.json").read_text()
    data = json.loads(text)
    data.update(test_accuracy=False, min_tp_size=1)
    data["perf_config"].update(tp_sizes=[1], batch_sizes=[1], input_tokens=[8], output_tokens=3, perf_time=0.2)
    (root / "byte_infer_perf/llm_perf/workloads/llama3-torch-bf16-70b.json").write_text(json.dumps(data))
    before = time.strftime("%Y-%m-%d %H:%M:%S")
    with running_testserver(TestServerConfig(port=free_loopback_port(), model="meta/llama3-70b", ttft_ms=1,
                                             itl_ms=1)) as url:  # fmt: skip
        # by bare name, without --model: the workload's model (here the last part of the served id) is measured
        assert main(["perf", "--url", url, "--workload", "llama3-torch-bf16-70b", "--no-plots", "--out-dir",
                     str(tmp_path / "o"), "--hardware-type", "MLU"]) == 0  # fmt: skip
    report = _report(tmp_path / "o")
    assert list(report)[: len(_TOP)] == _TOP
    assert report["Model"] == "llama3-torch-bf16-70b"  # the task, as the reporter's Model
    assert report["Backend"] == "MLU" and report["lmmbench"]["backend_source"] == "--hardware-type"
    assert report["Version"] == "1.0.0"  # ByteMLPerf's VERSION of the checkout the workload came from
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", report["Execution Date"])
    assert before <= report["Execution Date"] <= time.strftime("%Y-%m-%d %H:%M:%S")
    assert (report["Min New Tokens"], report["Max New Tokens"]) == (1, 512)  # launch.py's Reporter(1, 512)
    assert report["lmmbench"]["served_model"] == "meta/llama3-70b" and report["lmmbench"]["lmmbench_version"]
    assert report["Host Info"]


def test_report_top_of_a_flat_workload_and_of_test_perf_false(tmp_path: Path, reference: tuple[Path, Path]) -> None:
    dataset, dump = reference
    flat = {"model": "tiny-llm", "test_accuracy": False, "test_perf": True, "min_new_tokens": 2, "max_new_tokens": 3,
            "tp_sizes": [1], "batch_sizes": [1], "input_tokens": [8], "perf_time": 0.2}  # fmt: skip
    path = tmp_path / "flat-task.json"
    path.write_text(json.dumps(flat))
    cfg = TestServerConfig(port=free_loopback_port(), model="tiny-llm", logprobs_reference=dump)
    with running_testserver(cfg) as url:
        out = str(tmp_path / "a")
        assert main(["perf", "--url", url, "--workload", str(path), "--no-plots", "--out-dir", out]) == 0
        report = _report(tmp_path / "a")
        assert (report["Model"], report["Min New Tokens"], report["Max New Tokens"]) == ("flat-task", 2, 3)
        assert report["Version"] is None and report["Backend"] in ("CPU", "GPU")
        assert report["lmmbench"]["backend_source"] == "detected on the machine lmmbench ran on"
        wl = _nested(tmp_path, name="acc-only", test_accuracy=True, test_perf=False, model="tiny-llm",
                     dataset=str(dataset))  # fmt: skip
        assert main(["perf", "--url", url, "--workload", str(wl), "--reference", str(dump), "--no-plots",
                     "--out-dir", str(tmp_path / "b")]) == 0  # fmt: skip
    report = _report(tmp_path / "b")
    assert "Min New Tokens" not in report and "Max New Tokens" not in report  # the reporter pops both
    assert report["Performance"] is None and isinstance(report["Accuracy"], dict)


def test_without_model_the_workloads_model_must_be_served(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    wl = _nested(tmp_path, model="chatglm2-6b")
    with running_testserver(TestServerConfig(port=free_loopback_port(), model="other-model")) as url:
        assert main(["perf", "--url", url, "--workload", str(wl), "--out-dir", str(tmp_path / "o")]) == 2
        assert server_stats(url)["requests"] == 0
    line = _one_line(capsys.readouterr().err)
    assert "'chatglm2-6b' is not served" in line and "other-model" in line and "--model" in line


def test_test_accuracy_without_a_reference_says_what_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = _nested(tmp_path, test_accuracy=True, perf_time=0.2)
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=1, itl_ms=1)) as url:
        assert main(["perf", "--url", url, "--model", "test-model", "--workload", str(wl), "--no-plots",
                     "--out-dir", str(tmp_path / "o")]) == 0  # fmt: skip
        err = capsys.readouterr().err
        note = [x for x in err.splitlines() if "needs --reference" in x]
        assert len(note) == 1 and "lmmbench reference dump" in note[0] and "only the perf points run" in note[0]
        report = _report(tmp_path / "o")
        assert report["Accuracy"] is None and len(report["Performance"]) == 1
        assert "only the perf points run" in report["lmmbench"]["accuracy_skipped"]
        wl = _nested(tmp_path, name="acc-only", test_accuracy=True, test_perf=False)
        before = server_stats(url)["requests"]
        assert main(["perf", "--url", url, "--model", "test-model", "--workload", str(wl),
                     "--out-dir", str(tmp_path / "x")]) == 2  # fmt: skip
        assert server_stats(url)["requests"] == before
    line = _one_line(capsys.readouterr().err)
    assert "needs --reference" in line and "nothing would run" in line


def test_accuracy_config_max_new_tokens_and_dataset_must_match_the_reference(
    tmp_path: Path, reference: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    dataset, dump = reference  # dumped with --max-new-tokens 3
    dead = f"http://127.0.0.1:{free_loopback_port()}"  # decided before any server is asked
    wl = _nested(tmp_path, test_accuracy=True, max_new_tokens=512, dataset=str(dataset))
    assert main(["perf", "--url", dead, "--workload", str(wl), "--reference", str(dump), "--out-dir",
                 str(tmp_path / "o")]) == 2  # fmt: skip
    line = _one_line(capsys.readouterr().err)
    assert "accuracy_config.max_new_tokens is 512" in line and "--max-new-tokens 512" in line
    other = tmp_path / "other.csv"
    other.write_text("id,question\n0,something else entirely\n")
    wl = _nested(tmp_path, test_accuracy=True, dataset=str(other))
    assert main(["perf", "--url", dead, "--workload", str(wl), "--reference", str(dump), "--out-dir",
                 str(tmp_path / "o")]) == 2  # fmt: skip
    assert "not the first 2" in _one_line(capsys.readouterr().err) and not (tmp_path / "o").exists()


def test_a_yaml_workload_names_only_its_unknown_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("model: m\nconcurrency: 2\npoints:\n  - {input_token: 8, output_tokens: 4}\n")
    assert main(["perf", "--workload", str(path), "--url", "http://127.0.0.1:9", "--out-dir", str(tmp_path / "o")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "points[0]: unknown field(s) 'input_token' (did you mean 'input_tokens'?)" in line
    assert "output_tokens'" not in line.split("did you mean")[0] and "'model'" not in line


def test_an_endpoint_without_logprobs_fails_the_accuracy_step_before_any_load(
    tmp_path: Path, reference: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    dataset, dump = reference
    wl = _nested(tmp_path, test_accuracy=True, model="tiny-llm", dataset=str(dataset), perf_time=5.0)
    with running_testserver(TestServerConfig(port=free_loopback_port(), model="tiny-llm", ttft_ms=1,
                                             itl_ms=1)) as url:  # fmt: skip
        assert main(["perf", "--url", url, "--workload", str(wl), "--reference", str(dump), "--no-plots",
                     "--out-dir", str(tmp_path / "o")]) == 2  # fmt: skip
        sent = server_received(url)
    assert "no log-probabilities" in _one_line(capsys.readouterr().err)
    # the pre-flight probe (chat), then the accuracy step's first completion with logprobs, and nothing after it:
    # the perf point (chat requests for 5 s) never started
    chat = [r for r in sent if r["path"].endswith("/chat/completions")]
    assert len(chat) == 1 and sent[-1]["path"].endswith("/v1/completions") and sent[-1]["body"]["logprobs"]
