"""`lmmbench bench serve`: `vllm bench serve` command lines run unchanged (but for the program, the port and an
added --tokenizer) against `lmmbench testserver` — the table auto_tune.sh greps, vLLM's result file in vLLM's
place, --profile — with values checked against the test server's injected TTFT / ITL. The effect of each flag on
the requests is in test_bench_serve_flags.py.

The command lines are auto_tune.sh's (vllm-project/vllm, benchmarks/auto_tune/auto_tune.sh at commit
01277f9cd6f7c69ad383babc745bc5a04e5da2b5), with its user settings substituted: INPUT_LEN=512 (its example is
4000: 1000 random prompts of 4000 tokens take ~35 s to draw here, in vLLM's sampler as in this one), OUTPUT_LEN=16,
MIN_CACHE_HIT_PCT=0 (so --random-prefix-len 0), MAX_LATENCY_ALLOWED_MS=100000000000; and the `vllm bench serve`
lines of vLLM's docs/benchmarking/cli.md (vllm-project/vllm at commit 069c00b0ef0cdfe6b76be33796162a8a4323d69c,
the stored version of that page; vLLM 0.33.0 is commit 4ba787ec9) whose datasets and backends lmmbench carries,
with <your data path> files made here. Left out: the custom_image line (no --num-prompts: 1000 image requests,
~30 s here; custom_image is checked in test_bench_serve_flags.py) and the --probe-request-rate line (see its test).
"""

from __future__ import annotations

import json
import re
import shlex
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver
from lmmbench.testing.sampler_tokenizer import build_sampler_tokenizer

AUTO_TUNE = [  # the three `vllm bench serve` calls of auto_tune.sh
    "--backend vllm --model $MODEL --dataset-name random --random-input-len 512 --random-output-len 16 --ignore-eos "
    "--disable-tqdm --request-rate inf --percentile-metrics ttft,tpot,itl,e2el --goodput e2el:100000000000 "
    "--num-prompts 1000 --random-prefix-len 0 --port $PORT",
    "--backend vllm --model $MODEL --dataset-name random --random-input-len 512 --random-output-len 16 --ignore-eos "
    "--disable-tqdm --request-rate 40 --percentile-metrics ttft,tpot,itl,e2el --goodput e2el:100000000000 "
    "--num-prompts 100 --random-prefix-len 0 --port $PORT",
    "--backend vllm --model $MODEL --dataset-name random --random-input-len 512 --random-output-len 16 --ignore-eos "
    "--disable-tqdm --request-rate 40 --percentile-metrics ttft,tpot,itl,e2el --goodput e2el:100000000000 "
    "--num-prompts 100 --random-prefix-len 0 --port $PORT --profile",
]
TTFT_MS, ITL_MS = 20.0, 2.0


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    port = free_loopback_port()
    with running_testserver(TestServerConfig(port=port, ttft_ms=TTFT_MS, itl_ms=ITL_MS)) as url:
        yield url, port


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sampler_tokenizer(tmp_path_factory.mktemp("tok"))


def _argv(line: str, port: int, tok: Path) -> list[str]:
    return [*shlex.split(line.replace("$MODEL", "test-model").replace("$PORT", str(port))), "--tokenizer", str(tok)]


def _grep(text: str, label: str) -> float:
    m = re.search(rf"^{re.escape(label)}\s+([0-9.]+)", text, flags=re.M)
    assert m, label
    return float(m.group(1))


@pytest.mark.parametrize("line", range(len(AUTO_TUNE)))
def test_auto_tune_command_lines_run_unchanged(
    line: int, server: tuple[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], tok: Path,
) -> None:
    url, port = server
    monkeypatch.chdir(tmp_path)
    before = json.loads(urllib.request.urlopen(f"{url}/stats").read())["profile_calls"]
    assert main(["bench", "serve", *_argv(AUTO_TUNE[line], port, tok)]) == 0
    out = capsys.readouterr().out
    throughput, e2el = _grep(out, "Request throughput (req/s):"), _grep(out, "P99 E2EL (ms):")
    assert throughput > 0 and _grep(out, "Request goodput (req/s):") == throughput  # every request met the goal
    n = 1000 if line == 0 else 100
    assert _grep(out, "Successful requests:") == n and _grep(out, "Failed requests:") == 0
    ttft, itl, mean_e2el = _grep(out, "Mean TTFT (ms):"), _grep(out, "Mean ITL (ms):"), _grep(out, "Mean E2EL (ms):")
    assert ttft >= TTFT_MS and itl >= ITL_MS * 0.9  # the injected delays are floors
    if line:  # at 40 req/s the server is not saturated: the injected truth, with a loose bound for a busy box
        assert ttft < TTFT_MS + 15 and itl < ITL_MS + 1.5
        assert mean_e2el == pytest.approx(ttft + 15 * itl, abs=3.0)  # E2E = TTFT + (n - 1) x ITL, 16 tokens
        assert e2el >= mean_e2el
    calls = json.loads(urllib.request.urlopen(f"{url}/stats").read())["profile_calls"][len(before):]
    assert calls == (["start_profile", "stop_profile"] if "--profile" in AUTO_TUNE[line] else [])
    assert not list(tmp_path.glob("*.json"))  # no --save-result: no result file, as vLLM


def test_result_file_in_vllms_place_with_vllms_keys(server: tuple[str, int], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch, tok: Path) -> None:
    _, port = server
    monkeypatch.chdir(tmp_path)
    base = ["--model", "test-model", "--port", str(port), "--num-prompts", "20", "--random-input-len", "16",
            "--random-output-len", "4", "--request-rate", "50", "--max-concurrency", "4", "--metadata", "tp=1",
            "version=x", "--tokenizer", str(tok)]  # fmt: skip
    assert main(["bench", "serve", *base, "--save-result", "--percentile-metrics",
                 "ttft,tpot,itl,e2el,client_queue_time,e2el_including_client_queue"]) == 0  # fmt: skip
    [path] = list(tmp_path.glob("openai-50.0qps-concurrency4-test-model-*.json"))  # vLLM's name, in the cwd
    result = json.loads(path.read_text())
    assert result["p99_client_queue_time_ms"] >= 0  # vLLM's --max-concurrency sections
    assert result["mean_e2el_including_client_queue_ms"] >= result["mean_e2el_ms"] - 1e-9
    for key in ("date", "backend", "model_id", "num_prompts", "request_rate", "burstiness", "max_concurrency",
                "duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput",
                "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                "mean_tpot_ms", "mean_itl_ms"):  # fmt: skip
        assert key in result, key
    assert result["completed"] == 20 and result["tp"] == "1" and result["version"] == "x"
    out = tmp_path / "res"
    assert main(["bench", "serve", *base, "--save-result", "--result-dir", str(out), "--result-filename",
                 "a.json"]) == 0  # fmt: skip
    assert main(["bench", "serve", *base, "--append-result", "--result-dir", str(out), "--result-filename",
                 "a.json"]) == 0  # fmt: skip
    lines = (out / "a.json").read_text().strip().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["completed"] == 20 for x in lines)




DOCS = {  # the `vllm bench serve` lines of docs/benchmarking/cli.md (commit in the module docstring)
    "online-sharegpt": "--backend vllm --model NousResearch/Hermes-3-Llama-3.1-8B --endpoint /v1/completions "
    "--dataset-name sharegpt --dataset-path <your data path>/ShareGPT_V3_unfiltered_cleaned_split.json "
    "--num-prompts 10",
    "custom": "--port 9001 --save-result --save-detailed --backend vllm --model meta-llama/Llama-3.1-8B-Instruct "
    "--endpoint /v1/completions --dataset-name custom --dataset-path <path-to-your-data-jsonl> "
    '--skip-chat-template --num-prompts 80 --max-concurrency 1 --temperature=0.3 --top-p=0.75 --result-dir "./log/"',
    "sampling": "--backend vllm --model NousResearch/Hermes-3-Llama-3.1-8B --endpoint /v1/completions "
    "--dataset-name sharegpt --dataset-path <your data path>/ShareGPT_V3_unfiltered_cleaned_split.json "
    "--top-k 10 --top-p 0.9 --temperature 0.5 --num-prompts 10",
    "plots": "--backend vllm --model meta-llama/Llama-3.1-8B-Instruct --endpoint /v1/completions "
    "--dataset-name sharegpt --dataset-path <your data path>/ShareGPT_V3_unfiltered_cleaned_split.json "
    "--num-prompts 100 --plot-timeline --timeline-itl-thresholds 2,5 --plot-dataset-stats --save-result",
    "timed-trace": "--model Qwen/Qwen3.5-2B --dataset-name=timed_trace --num-prompts 100 --host 127.0.0.1 "
    "--port 8000 --dataset-path ./conversation_trace.jsonl --ignore-eos --self-timed "
    "--timed-trace-chunk-hash-size 512 --timed-trace-sec-multiplier 0.001",
    "prefix-repetition": "--backend openai --model meta-llama/Llama-2-7b-chat-hf --dataset-name prefix_repetition "
    "--num-prompts 100 --prefix-repetition-prefix-len 512 --prefix-repetition-suffix-len 128 "
    "--prefix-repetition-num-prefixes 5 --prefix-repetition-output-len 128",
    "sharegpt4v-images": "--backend openai-chat --model Qwen/Qwen2.5-VL-7B-Instruct --dataset-name sharegpt "
    "--dataset-path /path/to/ShareGPT4V/sharegpt4v_instruct_gpt4-vision_cap100k.json --num-prompts 100 "
    "--save-result --result-dir ~/vllm_benchmark_results --save-detailed --endpoint /v1/chat/completions",
    "random-mm": "--backend openai-chat --model Qwen/Qwen2.5-VL-3B-Instruct --endpoint /v1/chat/completions "
    "--dataset-name random-mm --num-prompts 100 --max-concurrency 10 --random-prefix-len 25 --random-input-len 300 "
    "--random-output-len 40 --random-range-ratio 0.2 --random-mm-base-items-per-request 2 "
    """--random-mm-limit-mm-per-prompt '{"image": 3, "video": 0}' --random-mm-bucket-config '{(224, 224, 1): 1.0}' """
    "--request-rate inf --ignore-eos --seed 42",
}  # fmt: skip
DOC_TTFT_MS, DOC_ITL_MS = 5.0, 0.2


@pytest.fixture(scope="module")
def doc_servers() -> Iterator[dict[str, int]]:
    """One test server per model name of the docs' lines (the server checks the model name as vLLM's does)."""
    import contextlib

    models = {re.search(r"--model (\S+)", line).group(1) for line in DOCS.values()}  # type: ignore[union-attr]
    with contextlib.ExitStack() as stack:
        ports = {}
        for model in sorted(models):
            port = free_loopback_port()
            stack.enter_context(running_testserver(TestServerConfig(port=port, model=model, ttft_ms=DOC_TTFT_MS,
                                                                    itl_ms=DOC_ITL_MS)))  # fmt: skip
            ports[model] = port
        yield ports


def _doc_files(tmp: Path) -> dict[str, str]:
    words = "the quick brown fox jumps over the lazy dog while seven wizards hex a jovial bank clerk".split()
    rows = [{"id": str(i), "conversations": [{"from": "human", "value": " ".join(words[: 4 + i % 12]) + f" {i}?"},
                                             {"from": "gpt", "value": " ".join(words[i % 5:]) * 2}]}
            for i in range(40)]  # fmt: skip
    (tmp / "sharegpt.json").write_text(json.dumps(rows), encoding="utf-8")
    images = [{**row, "image": f"coco/train2017/{i:012d}.jpg"} for i, row in enumerate(rows)]  # ShareGPT4V's rows
    (tmp / "sharegpt4v.json").write_text(json.dumps(images), encoding="utf-8")
    (tmp / "data.jsonl").write_text("".join(json.dumps({"prompt": f"What is the capital of country {i}?"}) + "\n"
                                            for i in range(20)), encoding="utf-8")  # fmt: skip
    from PIL import Image

    for i in range(3):
        Image.new("RGB", (32 + 8 * i, 24), (40 * i, 90, 200)).save(tmp / f"img{i}.png")
    (tmp / "images.jsonl").write_text("".join(json.dumps({"prompt": f"How many shapes in picture {i}?", "image_files":
                                                          [str(tmp / f"img{i}.png")]}) + "\n" for i in range(3)))
    trace = [{"timestamp": 20 * i, "input_length": 600 + 40 * (i % 7), "output_length": 4 + i % 5,
              "hash_ids": [i % 3, 100 + i]} for i in range(120)]  # a Mooncake conversation trace's shape
    (tmp / "conversation_trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trace))
    return {"<your data path>/ShareGPT_V3_unfiltered_cleaned_split.json": str(tmp / "sharegpt.json"),
            "<path-to-your-image-data-jsonl>": str(tmp / "images.jsonl"),
            "<path-to-your-data-jsonl>": str(tmp / "data.jsonl"),
            "/path/to/ShareGPT4V/sharegpt4v_instruct_gpt4-vision_cap100k.json": str(tmp / "sharegpt4v.json")}


@pytest.mark.parametrize("name", list(DOCS))
def test_docs_command_lines_run_unchanged(name: str, doc_servers: dict[str, int], tok: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Exit 0, vLLM's table, the result file where vLLM writes it, values against the injected TTFT / ITL."""
    import os

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # `~/vllm_benchmark_results`, as a shell expands it
    line = DOCS[name]
    for placeholder, path in _doc_files(tmp_path).items():
        line = line.replace(placeholder, path)
    argv = [os.path.expanduser(a) for a in shlex.split(line)]
    model = argv[argv.index("--model") + 1]
    port = str(doc_servers[model])
    if "--port" in argv:
        argv[argv.index("--port") + 1] = port
    else:
        argv += ["--port", port]
    assert main(["bench", "serve", *argv, "--tokenizer", str(tok)]) == 0
    out = capsys.readouterr().out
    n = int(argv[argv.index("--num-prompts") + 1]) if "--num-prompts" in argv else 1000  # vLLM's default
    assert _grep(out, "Successful requests:") == n and _grep(out, "Failed requests:") == 0
    ttft, itl, tpot = _grep(out, "Mean TTFT (ms):"), _grep(out, "Mean ITL (ms):"), _grep(out, "Mean TPOT (ms):")
    assert ttft >= DOC_TTFT_MS and tpot > 0 and itl > 0  # the injected TTFT is a floor
    if "--max-concurrency 1 " in line:  # one request at a time: the injected truth, loosely on a busy box
        assert ttft < DOC_TTFT_MS + 10 and DOC_ITL_MS * 0.5 < tpot < DOC_ITL_MS + 0.5
    if "--save-result" in argv:
        folder = Path(argv[argv.index("--result-dir") + 1]) if "--result-dir" in argv else tmp_path
        conc = f"-concurrency{argv[argv.index('--max-concurrency') + 1]}" if "--max-concurrency" in argv else ""
        backend = argv[argv.index("--backend") + 1] if "--backend" in argv else "openai"
        [path] = list(folder.glob(f"{backend}-infqps{conc}-{model.split('/')[-1]}-*.json"))  # vLLM's file name
        result = json.loads(path.read_text())
        assert result["completed"] == n and result["model_id"] == model
        if "--plot-timeline" in argv:  # vLLM's figures beside the file
            assert path.with_suffix(".timeline.html").is_file() and path.with_suffix(".dataset_stats.png").is_file()
            return
        assert len(result["ttfts"]) == n
        ends = [t + sum(i) for t, i in zip(result["ttfts"], result["itls"], strict=True)]  # E2E = TTFT + the ITLs
        assert all(abs(e - lat) < 0.005 for e, lat in zip(ends, result["latencies"], strict=True))


def test_auto_tune_greps_find_their_lines(server: tuple[str, int], tok: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """auto_tune.sh greps the printed table of a subprocess: the lines are on standard output."""
    import subprocess
    import sys

    _, port = server
    monkeypatch.chdir(tmp_path)
    argv = _argv(AUTO_TUNE[1].replace("--num-prompts 100", "--num-prompts 20"), port, tok)
    proc = subprocess.run([sys.executable, "-m", "lmmbench.cli.main", "bench", "serve", *argv], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^Request throughput \(req/s\):\s+[0-9.]+", proc.stdout, re.M)
    assert re.search(r"^P99 E2EL \(ms\):\s+[0-9.]+", proc.stdout, re.M)


def test_plots_and_detailed_lists_beside_the_result_file(server: tuple[str, int], tok: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """--plot-timeline, --timeline-itl-thresholds and --plot-dataset-stats (vLLM's docs' line) write vLLM's two
    figures beside the result file; without --save-detailed the file has no per-request lists, as vLLM's."""
    _, port = server
    monkeypatch.chdir(tmp_path)
    base = ["--model", "test-model", "--port", str(port), "--num-prompts", "12", "--random-input-len", "16",
            "--random-output-len", "5", "--tokenizer", str(tok), "--result-filename", "r.json"]  # fmt: skip
    assert main(["bench", "serve", *base, "--plot-timeline", "--timeline-itl-thresholds", "2,5",
                 "--plot-dataset-stats", "--save-result"]) == 0  # fmt: skip
    page = (tmp_path / "r.timeline.html").read_text()
    assert page.count("<title>request ") == 12 and "green &lt; 2 ms" in page
    assert (tmp_path / "r.dataset_stats.png").read_bytes()[:4] == b"\x89PNG"
    assert "ttfts" not in json.loads((tmp_path / "r.json").read_text())
    assert main(["bench", "serve", *base, "--plot-dataset-stats"]) == 2  # vLLM needs a result file for it
    # wrong output flags are found before the load: nothing is sent to the server for them
    sent = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats").read())["requests"]
    assert main(["bench", "serve", *base, "--plot-timeline", "--timeline-itl-thresholds", "2,x"]) == 2
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    assert main(["bench", "serve", *base, "--save-result", "--result-dir", str(tmp_path / "a-file" / "sub")]) == 2
    assert json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats").read())["requests"] == sent


def test_probe_requests_run_beside_the_load(server: tuple[str, int], tok: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """--probe-request-rate (vLLM's docs' probe line, smaller: its 1000 prompts of 2048x2048 images at 4 req/s
    take minutes): one-token probes beside the load, their latency in the table and the result file."""
    url, port = server
    monkeypatch.chdir(tmp_path)
    before = json.loads(urllib.request.urlopen(f"{url}/stats").read())["requests"]
    argv = ["--model", "test-model", "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--port",
            str(port), "--dataset-name", "random-mm", "--random-mm-bucket-config", "{(64, 64, 1): 1.0}",
            "--num-prompts", "20", "--random-input-len", "16", "--random-output-len", "20", "--request-rate", "20",
            "--probe-request-rate", "20", "--tokenizer", str(tok), "--save-result", "--result-filename", "p.json"]
    assert main(["bench", "serve", *argv]) == 0
    out = capsys.readouterr().out
    done = _grep(out, "Probe requests completed:")
    assert done >= 5 and _grep(out, "Probe requests failed:") == 0
    assert TTFT_MS <= _grep(out, "Median probe E2EL (ms):") <= _grep(out, "Max probe E2EL (ms):")
    result = json.loads((tmp_path / "p.json").read_text())
    assert result["probe_completed"] == done and result["completed"] == 20
    after = json.loads(urllib.request.urlopen(f"{url}/stats").read())["requests"]
    assert after - before >= 20 + done  # the probes reached the server beside the 20 requests


def test_ramp_up_run_writes_vllms_ramp_keys_and_name(server: tuple[str, int], tok: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    _, port = server
    monkeypatch.chdir(tmp_path)
    argv = ["--model", "test-model", "--port", str(port), "--num-prompts", "30", "--random-input-len", "8",
            "--random-output-len", "3", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "10",
            "--ramp-up-end-rps", "40", "--tokenizer", str(tok), "--save-result"]  # fmt: skip
    assert main(["bench", "serve", *argv]) == 0
    [path] = list(tmp_path.glob("openai-ramp-up-linear-10qps-40qps-test-model-*.json"))  # vLLM's ramp-up name
    result = json.loads(path.read_text())
    assert (result["ramp_up_strategy"], result["ramp_up_start_rps"], result["ramp_up_end_rps"]) == ("linear", 10, 40)
    assert result["request_rate"] == "inf" and result["completed"] == 30
    assert [e["rps"] for e in result["rps_change_events"]] == list(range(10, 41))
