"""`lmmbench perf` writes vLLM's result file, and takes the vLLM spellings that mean there what they mean in
`vllm bench serve`; the vLLM spellings that would act differently in perf are not perf flags (whole vLLM command
lines run under `lmmbench bench serve`: test_bench_serve.py)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.options import PerfConfig
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

# vLLM's docs/benchmarking/cli.md "Custom Dataset" line with perf's own dataset flag (`--dataset jsonl`: perf's
# reader; vLLM's custom sampler is `lmmbench bench serve --dataset-name custom`).
DOCS_COMMAND = """lmmbench perf --port {port} --save-result --save-detailed \\
  --backend vllm \\
  --model meta-llama/Llama-3.1-8B-Instruct \\
  --endpoint /v1/completions \\
  --dataset jsonl \\
  --dataset-path {data} \\
  --num-prompts 80 \\
  --max-concurrency 1 \\
  --temperature=0.3 \\
  --top-p=0.75 \\
  --result-dir "{result_dir}"
"""

# The keys vLLM's vllm/benchmarks/serve.py writes with --save-result --save-detailed (setup keys of
# main_async, the result dict of benchmark(), process_one_metric for ttft/tpot/itl at --metric-percentiles 99,
# client_queue_time with --max-concurrency), written here by hand from that source.
VLLM_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput", "input_lens",
    "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times", "generated_texts", "errors",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
    "std_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p99_itl_ms",
}  # fmt: skip


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    port = free_loopback_port()
    with running_testserver(TestServerConfig(port=port, model=MODEL, ttft_ms=3, itl_ms=0.5)) as url:
        yield url, port


def test_vllm_docs_command_runs_unchanged_and_writes_vllm_result(
    server: tuple[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = [f"What is the capital of country number {i}?" for i in range(5)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    monkeypatch.chdir(tmp_path)
    command = DOCS_COMMAND.format(port=server[1], data="data.jsonl", result_dir="./log/")
    argv = shlex.split(command.replace("\\\n", " "))  # line continuations, as the shell reads them
    assert argv[:2] == ["lmmbench", "perf"]
    assert main(argv[1:]) == 0
    assert "vLLM-style flags" in capsys.readouterr().err
    files = list((tmp_path / "log").iterdir())
    assert len(files) == 1 and files[0].name.startswith("vllm-infqps-concurrency1-Llama-3.1-8B-Instruct-")
    res = json.loads(files[0].read_text())
    assert set(res) >= VLLM_KEYS, VLLM_KEYS - set(res)
    assert res["model_id"] == MODEL and res["backend"] == "vllm" and res["max_concurrency"] == 1
    assert res["completed"] == 80 and res["failed"] == 0 and res["num_prompts"] == 80
    assert res["max_concurrent_requests"] == 1  # --max-concurrency 1 held
    assert sorted(set(res["input_lens"])) == sorted({len(p.split()) for p in prompts})  # the words it sent
    assert set(res["output_lens"]) == {32} and all(len(x) == 31 for x in res["itls"])
    assert res["total_output_tokens"] == 80 * 32
    # injected: TTFT 3 ms, ITL 0.5 ms (seconds in the lists, ms in the summaries)
    assert 2.9 <= res["median_ttft_ms"] < 30 and 0.3 <= res["median_itl_ms"] < 5  # per token: a server catching up
    # after a stall sends its late tokens closer together
    assert res["median_ttft_ms"] == pytest.approx(sorted(res["ttfts"])[39] * 500 + sorted(res["ttfts"])[40] * 500)
    assert all(t.startswith(" alpha bravo") for t in res["generated_texts"])
    assert res["request_throughput"] == pytest.approx(80 / res["duration"])


def test_random_dataset_goodput_percentiles_and_rate(server: tuple[str, int], tmp_path: Path) -> None:
    argv = ["perf", "--base-url", server[0], "--model", MODEL, "--endpoint", "/v1/chat/completions",
            "--dataset", "synthetic", "--input-tokens", "40", "--output-tokens", "6",
            "--random-range-ratio", "0.5", "--rate", "400", "--max-concurrency", "4", "--num-prompts", "24",
            "--goodput", "ttft:10000 e2el:20000", "--percentile-metrics", "ttft,e2el",
            "--metric-percentiles", "25,50,99.9", "--seed", "7", "--save-result", "--result-filename", "r.json",
            "--out-dir", str(tmp_path), "--run-name", "x", "--no-plots"]  # fmt: skip
    assert main(argv) == 0
    res = json.loads((tmp_path / "perf" / "x" / "r.json").read_text())  # the run folder without --result-dir
    assert res["completed"] == 24 and res["request_rate"] == 400.0
    assert {"p25_ttft_ms", "p50_ttft_ms", "p99.9_ttft_ms", "p99.9_e2el_ms", "mean_e2el_ms"} <= set(res)
    assert not any(k.endswith("_tpot_ms") or k.endswith("_itl_ms") for k in res)  # not selected
    assert "ttfts" not in res  # per-request lists only with --save-detailed, as in vLLM
    assert res["request_goodput"] == pytest.approx(res["request_throughput"])  # generous SLOs: all good
    assert res["max_concurrent_requests"] <= 4
    records = [json.loads(line) for line in (tmp_path / "perf" / "x" / "records.jsonl").read_text().splitlines()]
    lens = [r["input_tokens"] for r in records]
    assert min(lens) >= 20 and max(lens) <= 60 and len(set(lens)) > 3  # uniform in [40(1-0.5), 40(1+0.5)]
    summary = (tmp_path / "perf" / "x" / "summary.csv").read_text().splitlines()[0].split(",")
    assert {"ttft_ms_p25", "ttft_ms_p99.9", "ttft_ms_p90"} <= set(summary)  # configurable + always-there


def test_vllm_values_translate_to_lmmbench_options() -> None:
    cfg = PerfConfig.model_validate({"endpoint": "/v1/chat/completions", "host": "10.0.0.2",
                                     "port": 9001, "slo": {"ttft": 500, "tpot": 50}, "top_k": 5})  # fmt: skip
    assert (cfg.endpoint, cfg.url) == ("chat", "http://10.0.0.2:9001")
    assert cfg.slo == {"ttft_ms": 500.0, "tpot_ms": 50.0} and cfg.extra_body == {"top_k": 5}
    assert PerfConfig.model_validate({"backend": "openai-chat"}).endpoint == "chat"
    assert PerfConfig.model_validate({"backend": "vllm"}).endpoint == "completions"  # as vLLM's backend picks
    assert PerfConfig.model_validate({"rate": 5, "burstiness": 0.2}).arrival == "gamma"  # as vLLM: no --arrival
    assert PerfConfig.model_validate({"url": "http://a:1", "port": 2}).url == "http://a:1"  # --base-url wins
    assert PerfConfig.model_validate({"rate": "inf"}).rate == float("inf")


def test_unknown_vllm_flag_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--dataset-name", "--request-rate", "--random-input-len", "--input-len", "--output-len",
                 "--custom-skip-chat-template"):  # vLLM's meaning differs in perf: bench serve takes them
        assert main(["perf", flag, "1", "--out-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert flag in err and "Traceback" not in err
    assert main(["perf", "--percentile-metrics", "ttft,latency", "--out-dir", str(tmp_path)]) == 2
    assert "unknown metric(s) ['latency']" in capsys.readouterr().err
    assert main(["perf", "--metric-percentiles", "50,150", "--out-dir", str(tmp_path)]) == 2
    assert "percentiles must be in (0, 100]" in capsys.readouterr().err


def test_a_sweep_writes_one_vllm_result_per_point(server: tuple[str, int], tmp_path: Path) -> None:
    argv = ["perf", "--base-url", server[0], "--model", MODEL, "--rates", "100,200", "--num-prompts", "6",
            "--output-tokens", "3", "--save-result", "--result-dir", str(tmp_path / "res"),
            "--out-dir", str(tmp_path), "--no-plots", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    files = sorted((tmp_path / "res").iterdir())
    assert [f.name.split("qps")[0] for f in files] == ["openai-100.0", "openai-200.0"]
    assert [f.stem.rsplit("-", 1)[-1] for f in files] == ["point0", "point1"]
    assert [json.loads(f.read_text())["request_rate"] for f in files] == [100.0, 200.0]
