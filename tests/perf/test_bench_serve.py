"""`lmmbench bench serve`: `vllm bench serve` command lines run unchanged (but for the program, port and model)
against `lmmbench testserver` — the table auto_tune.sh greps, vLLM's result file in vLLM's place, --profile —
with values checked against the test server's injected TTFT / ITL; every flag of vLLM 0.33.0's parser is
either carried (its effect asserted below) or refused with a reason.

The command lines are auto_tune.sh's (vllm-project/vllm, benchmarks/auto_tune/auto_tune.sh at commit
01277f9cd6f7c69ad383babc745bc5a04e5da2b5), with its defaults substituted: INPUT_LEN=4000, OUTPUT_LEN=16,
MIN_CACHE_HIT_PCT=0 (so --random-prefix-len 0), MAX_LATENCY_ALLOWED_MS=100000000000.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import statistics
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf_testserver import TestServerConfig
from lmmbench.config.vllm_bench_serve import _CARRIED, VLLM_FLAGS, build_parser, translate
from lmmbench.core.errors import UserError
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver

AUTO_TUNE = [  # the three `vllm bench serve` calls of auto_tune.sh
    "--backend vllm --model $MODEL --dataset-name random --random-input-len 4000 --random-output-len 16 --ignore-eos "
    "--disable-tqdm --request-rate inf --percentile-metrics ttft,tpot,itl,e2el --goodput e2el:100000000000 "
    "--num-prompts 1000 --random-prefix-len 0 --port $PORT",
    "--backend vllm --model $MODEL --dataset-name random --random-input-len 4000 --random-output-len 16 --ignore-eos "
    "--disable-tqdm --request-rate 40 --percentile-metrics ttft,tpot,itl,e2el --goodput e2el:100000000000 "
    "--num-prompts 100 --random-prefix-len 0 --port $PORT",
    "--backend vllm --model $MODEL --dataset-name random --random-input-len 4000 --random-output-len 16 --ignore-eos "
    "--disable-tqdm --request-rate 40 --percentile-metrics ttft,tpot,itl,e2el --goodput e2el:100000000000 "
    "--num-prompts 100 --random-prefix-len 0 --port $PORT --profile",
]
TTFT_MS, ITL_MS = 20.0, 2.0


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    port = free_loopback_port()
    with running_testserver(TestServerConfig(port=port, ttft_ms=TTFT_MS, itl_ms=ITL_MS)) as url:
        yield url, port


def _argv(line: str, port: int) -> list[str]:
    return shlex.split(line.replace("$MODEL", "test-model").replace("$PORT", str(port)))


def _grep(text: str, label: str) -> float:
    m = re.search(rf"^{re.escape(label)}\s+([0-9.]+)", text, flags=re.M)
    assert m, label
    return float(m.group(1))


@pytest.mark.parametrize("line", range(len(AUTO_TUNE)))
def test_auto_tune_command_lines_run_unchanged(
    line: int, server: tuple[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, port = server
    monkeypatch.chdir(tmp_path)
    before = json.loads(urllib.request.urlopen(f"{url}/stats").read())["profile_calls"]
    assert main(["bench", "serve", *_argv(AUTO_TUNE[line], port)]) == 0
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
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _, port = server
    monkeypatch.chdir(tmp_path)
    base = ["--model", "test-model", "--port", str(port), "--num-prompts", "20", "--random-input-len", "16",
            "--random-output-len", "4", "--request-rate", "50", "--max-concurrency", "4", "--metadata", "tp=1",
            "version=x"]  # fmt: skip
    assert main(["bench", "serve", *base, "--save-result"]) == 0
    [path] = list(tmp_path.glob("openai-50.0qps-concurrency4-test-model-*.json"))  # vLLM's name, in the cwd
    result = json.loads(path.read_text())
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


def test_refused_flags_say_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "serve", "--trust-remote-code"]) == 2
    assert "runs no repository code" in capsys.readouterr().err
    assert main(["bench", "serve", "--backend", "openai-embeddings"]) == 2
    assert "embeddings" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [f for f in VLLM_FLAGS if f["dest"] not in _CARRIED], ids=lambda f: f["flags"][0])
def test_every_flag_not_carried_is_refused_by_name(flag: dict[str, object]) -> None:
    ns = build_parser().parse_args([])
    setattr(ns, str(flag["dest"]), "a value other than vLLM's default")
    with pytest.raises(UserError, match=re.escape(str(flag["flags"][0]))):  # type: ignore[index]
        translate(ns)


def test_carried_flags_reach_the_config() -> None:
    """Each carried flag, set to a non-default value, changes the perf config as vLLM's flag changes its run."""
    ns = build_parser().parse_args(shlex.split(
        "--backend openai-chat --endpoint /v1/chat/completions --base-url http://h:1 --served-model-name srv "
        "--model m --num-prompts 7 --random-input-len 11 --random-output-len 3 --random-range-ratio 0.5 "
        "--request-rate 2.5 --burstiness 0.2 --max-concurrency 3 --seed 9 --ignore-eos --num-warmups 2 "
        "--save-detailed --label L --metadata a=1 b=2 --percentile-metrics ttft,e2el --metric-percentiles 50,99 "
        "--goodput ttft:500 tpot:50 --temperature 0.5 --top-p 0.9 --top-k 5 --min-p 0.1 --frequency-penalty 0.3 "
        "--presence-penalty 0.2 --repetition-penalty 1.1 --disable-tqdm --ready-check-timeout-sec 7 "
        "--random-prefix-len 4 "
        """--extra-body '{"chat_template_kwargs":{"enable_thinking":false}}'"""))  # fmt: skip
    cfg = translate(ns)
    assert cfg["url"] == "http://h:1" and cfg["endpoint"] == "chat" and cfg["model"] == "srv"
    assert (cfg["num_requests"], cfg["input_tokens"], cfg["output_tokens"]) == (7, 11, 3)
    assert cfg["random_range_ratio"] == 0.5 and (cfg["rate"], cfg["arrival"], cfg["burstiness"]) == (2.5, "gamma", 0.2)
    assert (cfg["concurrency"], cfg["seed"]) == (3, 9)
    assert cfg["ignore_eos"] is True and cfg["warmup_requests"] == 2 and cfg["save_detailed"] is True
    assert cfg["label"] == "L" and cfg["metadata"] == {"a": "1", "b": "2"}
    assert cfg["percentile_metrics"] == ["ttft", "e2el"] and cfg["percentiles"] == [50.0, 99.0]
    assert cfg["slo"] == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    assert (cfg["temperature"], cfg["top_p"], cfg["top_k"], cfg["min_p"]) == (0.5, 0.9, 5, 0.1)
    assert cfg["extra_body"] == {"chat_template_kwargs": {"enable_thinking": False}, "frequency_penalty": 0.3,
                                 "presence_penalty": 0.2, "repetition_penalty": 1.1}  # fmt: skip
    assert cfg["progress"] is False and cfg["wait_for_server"] == 7.0
    assert (cfg["dataset"], cfg["prefix_groups"], cfg["prefix_tokens"]) == ("shared_prefix", 1, 4)
    assert cfg["suffix_tokens"] == 11
    defaults = translate(build_parser().parse_args([]))  # vLLM's defaults, not lmmbench perf's
    assert defaults["num_requests"] == 1000 and defaults["endpoint"] == "completions"
    assert defaults["ignore_eos"] is False
    assert defaults["rate"] == float("inf") and defaults["url"] == "http://127.0.0.1:8000"
    assert build_parser().parse_args(["--num-prom", "5"]).num_prompts == 5  # argparse's prefix abbreviation


def test_burstiness_0_2_gives_gamma_gaps_with_cv_2_2() -> None:
    """vLLM draws gaps from gamma(shape=burstiness): a coefficient of variation of 1/sqrt(0.2) = 2.24. Over 20,000
    gaps its sampling error is a few percent."""
    from lmmbench.loadgen.arrivals import arrival_offsets_ns

    cfg = translate(build_parser().parse_args(["--request-rate", "100", "--burstiness", "0.2"]))
    offsets = arrival_offsets_ns(cfg["arrival"], cfg["rate"], count=20_001, seed=0, burstiness=cfg["burstiness"])
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(offsets)]
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    assert cv == pytest.approx(0.2**-0.5, rel=0.08)
    assert statistics.fmean(gaps) == pytest.approx(1 / 100, rel=0.05)
