"""`lmmbench bench sglang`: the usage command lines of SGLang's `bench_serving` run unchanged (but for the program
name, the port and, for the ShareGPT line, a tokenizer) against `lmmbench testserver` — SGLang's summary printed,
its JSON-lines output file in SGLang's place with SGLang's keys, values checked against the test server's injected
TTFT / ITL; every flag of SGLang 0.5.23's parser is either carried or refused with a reason.

The usage lines are the docstring of sglang 0.5.23's `sglang/benchmark/serving.py` (the wheel of that release;
`sglang/bench_serving.py` is a shim that runs it). `--backend sglang` is SGLang's native `/generate` API, which
lmmbench's client and test server speak. The first line reads SGLang's ShareGPT file from the Hugging Face hub
(`anon8231489123/ShareGPT_Vicuna_unfiltered`), here a small one written into a hub cache, read offline.
"""

from __future__ import annotations

import json
import random
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.dropins.sglang_serving import (
    CARRIED,
    IN_SGLANG_ONLY,
    REFUSED_BACKENDS,
    SGLANG_FLAGS,
    SGLANG_USAGE,
    _lengths,
    build_parser,
    translate,
)
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.errors import UserError
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import build_word_tokenizer, running_testserver

pytestmark = pytest.mark.serial  # timing against injected truth

USAGE = [  # sglang 0.5.23, sglang/benchmark/serving.py, its module docstring
    "python3 -m sglang.benchmark.serving --backend sglang --num-prompt 10",
    "python3 -m sglang.benchmark.serving --backend sglang --dataset-name random --num-prompts 3000 "
    "--random-input 1024 --random-output 1024 --random-range-ratio 0.5",
]
#: every option of sglang 0.5.23's parser (cli_main), in its order
SGLANG_OPTIONS = (
    "--backend --base-url --host --port --ready-check-timeout-sec --dataset-name --dataset-path --dataset-offset "
    "--agentic-max-turns --speed-bench-category --speed-bench-output-len --model --served-model-name --tokenizer "
    "--num-prompts --sharegpt-output-len --sharegpt-context-len --random-input-len --random-output-len "
    "--random-range-ratio --image-count --image-resolution --random-image-count --image-format --image-content "
    "--request-rate --use-trace-timestamps --max-concurrency --output-file --output-details --goodput "
    "--print-requests --disable-tqdm --disable-stream --return-logprob --top-logprobs-num --token-ids-logprob "
    "--logprob-start-len --return-routed-experts --cache-report --seed --disable-ignore-eos --temperature --top-p "
    "--extra-request-body --apply-chat-template --profile --plot-throughput --profile-activities "
    "--profile-start-step --profile-steps --profile-num-steps --profile-by-stage --profile-stages "
    "--profile-output-dir --profile-prefix --lora-name --lora-request-distribution --lora-zipf-alpha "
    "--prompt-suffix --pd-separated --profile-prefill-url --profile-decode-url --flush-cache --flush-cache-timeout "
    "--warmup-requests --tokenize-prompt --gsp-num-groups --gsp-prompts-per-group --gsp-system-prompt-len "
    "--gsp-question-len --gsp-output-len --gsp-range-ratio --gsp-fast-prepare --gsp-send-routing-key "
    "--gsp-num-turns --gsp-ordered --gsp-group-distribution --gsp-zipf-alpha --mooncake-slowdown-factor "
    "--mooncake-num-rounds --mooncake-workload --fake-prefill --tag --header --rust-client --rust-worker-threads"
).split()
#: the keys of SGLang's output line (``result`` in ``benchmark()``), then goodput's, then --output-details' lists
RESULT_KEYS = (
    "tag backend dataset_name request_rate max_concurrency sharegpt_output_len random_input_len random_output_len "
    "random_range_ratio server_info duration completed total_input_tokens total_input_text_tokens "
    "total_input_vision_tokens total_output_tokens total_output_tokens_retokenized request_throughput "
    "input_throughput output_throughput total_throughput mean_e2e_latency_ms median_e2e_latency_ms "
    "std_e2e_latency_ms p90_e2e_latency_ms p95_e2e_latency_ms p99_e2e_latency_ms mean_ttft_ms median_ttft_ms "
    "std_ttft_ms p90_ttft_ms p95_ttft_ms p99_ttft_ms mean_tpot_ms median_tpot_ms std_tpot_ms p90_tpot_ms "
    "p95_tpot_ms p99_tpot_ms mean_itl_ms median_itl_ms std_itl_ms p90_itl_ms p95_itl_ms p99_itl_ms concurrency "
    "accept_length max_output_tokens_per_s max_concurrent_requests"
).split()
GOODPUT_KEYS = ["goodput_slos_ms", "request_goodput", "slo_attainment", "slo_attainment_by_metric"]
DETAIL_KEYS = ["input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"]
TTFT_MS, ITL_MS, CHUNK = 20.0, 2.0, 4
PROMPT_WORDS, REPLY_WORDS = 6, 12


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    """A server that streams CHUNK tokens per event, ITL_MS apart per token."""
    port = free_loopback_port()
    with running_testserver(TestServerConfig(port=port, ttft_ms=TTFT_MS, itl_ms=ITL_MS, tokens_per_chunk=CHUNK)):
        yield port


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_word_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture
def sharegpt_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """SGLang's ShareGPT file in a Hugging Face hub cache, as `hf download` leaves it; the hub offline."""
    repo = tmp_path / "hf" / "hub" / "datasets--anon8231489123--ShareGPT_Vicuna_unfiltered"
    commit = "0" * 39 + "1"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    rng = random.Random(1)
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()
    rows = [{"id": str(i), "conversations": [
        {"from": "human", "value": " ".join(rng.choice(words) for _ in range(PROMPT_WORDS))},
        {"from": "gpt", "value": " ".join(rng.choice(words) for _ in range(REPLY_WORDS))}]} for i in range(40)]
    (snap / "ShareGPT_V3_unfiltered_cleaned_split.json").write_text(json.dumps(rows))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snap


def _argv(line: str, port: int, *extra: str) -> list[str]:
    args = shlex.split(line)
    assert args[:3] == ["python3", "-m", "sglang.benchmark.serving"]
    return ["bench", "sglang", *args[3:], "--port", str(port), *extra]


def _grep(text: str, label: str) -> float:
    m = re.search(rf"^{re.escape(label)}\s+([0-9.]+)", text, flags=re.M)
    assert m, label
    return float(m.group(1))


def _one_line(folder: Path, pattern: str) -> dict[str, object]:
    [path] = list(folder.glob(pattern))
    [line] = path.read_text().splitlines()
    return json.loads(line)  # type: ignore[no-any-return]


def test_the_usage_lines_are_sglangs() -> None:
    """The lines stored here are the ones in the extracted usage text, and the flag list is SGLang's."""
    usage = " ".join(SGLANG_USAGE.split())
    assert all(line in usage for line in USAGE)
    assert [f["flags"][0] for f in SGLANG_FLAGS] == SGLANG_OPTIONS


def test_usage_line_1_sharegpt_from_the_hub_cache(server: int, tokenizer: Path, sharegpt_hub: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert main(_argv(USAGE[0], server, "--tokenizer", str(tokenizer))) == 0
    out = capsys.readouterr().out
    assert "=== Serving Benchmark Result ===" in out and "Backend:                                 sglang" in out
    assert _grep(out, "Successful requests:") == 10
    res = _one_line(tmp_path, "sglang_*_10_sharegpt.jsonl")  # SGLang's default name, in the working directory
    assert list(res) == RESULT_KEYS
    # the truth: ShareGPT prompts of PROMPT_WORDS tokens, replies of REPLY_WORDS tokens (the reply's length is
    # the request's output length, as SGLang samples it); TTFT_MS to the first event, ITL_MS per token
    assert res["completed"] == 10 and res["total_input_tokens"] == 10 * PROMPT_WORDS
    assert res["total_output_tokens"] == res["total_output_tokens_retokenized"] == 10 * REPLY_WORDS
    assert TTFT_MS <= float(res["mean_ttft_ms"]) < TTFT_MS + 15  # type: ignore[arg-type]
    assert ITL_MS * 0.9 <= float(res["mean_itl_ms"]) < ITL_MS + 1.5  # type: ignore[arg-type]
    assert _grep(out, "Mean TTFT (ms):") == pytest.approx(res["mean_ttft_ms"], abs=0.006)


def test_usage_line_2_random_3000_prompts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """3000 prompts sent at once, 512..1024 tokens in and out: a server streaming 256 tokens per event at 0.2 ms
    per token (word mode: no tokenizer, as the line gives none)."""
    monkeypatch.chdir(tmp_path)
    port = free_loopback_port()
    with running_testserver(TestServerConfig(port=port, ttft_ms=TTFT_MS, itl_ms=0.2, tokens_per_chunk=256)):
        assert main(_argv(USAGE[1], port)) == 0
    out = capsys.readouterr().out
    assert _grep(out, "Successful requests:") == 3000 and "Traffic request rate:                    inf" in out
    res = _one_line(tmp_path, "sglang_*_3000_1024_1024.jsonl")
    assert list(res) == RESULT_KEYS and res["completed"] == 3000 and res["random_range_ratio"] == 0.5
    mean_in = int(res["total_input_tokens"]) / 3000  # type: ignore[call-overload]
    assert 512 + 20 < mean_in < 1024 - 20  # uniform in SGLang's [512, 1024]: mean 768, sampling error ~3
    assert float(res["mean_ttft_ms"]) >= TTFT_MS and float(res["mean_itl_ms"]) >= 0.2 * 0.9  # type: ignore[arg-type]


def test_openai_backend_itl_is_per_token_and_output_file_as_sglang(
    server: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SGLang's OpenAI backends take one ITL per chunk (here CHUNK x ITL_MS); lmmbench's is per token."""
    out_file = tmp_path / "res.jsonl"
    base = ["--dataset-name", "random", "--num-prompts", "20", "--random-input", "16", "--random-output", "16",
            "--random-range-ratio", "1", "--request-rate", "50", "--max-concurrency", "4", "--output-file",
            str(out_file), "--goodput", "ttft:1000", "e2el:5000", "--tag", "t1"]  # fmt: skip
    assert main(_argv("python3 -m sglang.benchmark.serving --backend sglang-oai", server, *base)) == 0
    assert main(_argv("python3 -m sglang.benchmark.serving --backend vllm-chat", server, *base,
                      "--output-details")) == 0  # fmt: skip
    first, second = (json.loads(x) for x in out_file.read_text().splitlines())  # appended, as SGLang appends
    assert list(first) == RESULT_KEYS + GOODPUT_KEYS and list(second) == RESULT_KEYS + GOODPUT_KEYS + DETAIL_KEYS
    for res in (first, second):
        assert ITL_MS * 0.9 <= res["mean_itl_ms"] < ITL_MS + 1.5  # not CHUNK x ITL_MS
        assert res["total_output_tokens"] == 20 * 16 and res["slo_attainment"] == 1.0 and res["tag"] == "t1"
    assert second["output_lens"] == [16] * 20 and len(second["itls"]) == 20
    assert all(t >= TTFT_MS / 1e3 for t in second["ttfts"])  # seconds, as SGLang writes them
    assert "Max request concurrency:                 4" in capsys.readouterr().out
    assert main(_argv("python3 -m sglang.benchmark.serving --backend sglang", server, *base[:-5],
                      "--output-file", "/dev/null")) == 0  # fmt: skip


def test_profile_around_the_run_and_an_unwritable_output_file(server: int, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """--profile: the server's /start_profile before the load and /stop_profile after it, as SGLang calls them;
    an output file in a missing folder is one line (exit 2) after the run, whose folder keeps the result."""
    from lmmbench.testing.fixtures import server_stats

    url = f"http://127.0.0.1:{server}"
    before = len(server_stats(url)["profile_calls"])
    args = ["--dataset-name", "random", "--num-prompts", "4", "--random-input", "8", "--random-output", "4"]
    assert main(_argv("python3 -m sglang.benchmark.serving --profile", server, *args, "--output-file",
                      str(tmp_path / "a.jsonl"))) == 0  # fmt: skip
    assert server_stats(url)["profile_calls"][before:] == ["start_profile", "stop_profile"]
    assert main(_argv("python3 -m sglang.benchmark.serving", server, *args, "--output-file",
                      str(tmp_path / "missing" / "a.jsonl"))) == 2  # fmt: skip
    assert "--output-file" in capsys.readouterr().err


def test_custom_conversations_jsonl(server: int, tmp_path: Path) -> None:
    """SGLang's `custom` data set: JSON lines of conversations (`content` or `value`); the reply's length is the
    request's output length, `--sharegpt-output-len` overrides it."""
    path = tmp_path / "conv.jsonl"
    path.write_text("".join(json.dumps({"conversations": [{"role": "user", "content": "alpha bravo " * (i + 2)},
                                                          {"role": "assistant", "content": "charlie " * 6}]}) + "\n"
                            for i in range(5)))  # fmt: skip
    out = tmp_path / "o.jsonl"
    base = ["--dataset-name", "custom", "--dataset-path", str(path), "--num-prompts", "5", "--output-file", str(out)]
    assert main(_argv("python3 -m sglang.benchmark.serving --backend sglang-oai-chat", server, *base)) == 0
    assert main(_argv("python3 -m sglang.benchmark.serving", server, *base, "--sharegpt-output-len", "9")) == 0
    first, second = (json.loads(x) for x in out.read_text().splitlines())
    assert first["total_output_tokens"] == 5 * 6 and second["total_output_tokens"] == 5 * 9
    assert first["total_input_tokens"] == sum(2 * (i + 2) for i in range(5))  # words, no tokenizer given
    with pytest.raises(UserError, match="needs --dataset-path"):
        translate(build_parser().parse_args(["--dataset-name", "custom"]))


def test_accept_length_and_server_info_as_sglang_reads_them(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """A server drafting 3 tokens at 0.5 acceptance reports an average accept length of 2.5 in /server_info."""
    port = free_loopback_port()
    out = tmp_path / "o.jsonl"
    with running_testserver(TestServerConfig(port=port, ttft_ms=1, itl_ms=0.2, spec_draft_tokens=3)):
        args = ["--dataset-name", "random", "--num-prompts", "4", "--random-input", "8", "--random-output", "4"]
        assert main(_argv("python3 -m sglang.benchmark.serving", port, *args, "--output-file", str(out))) == 0
    assert _grep(capsys.readouterr().out, "Accept length:") == 2.5
    res = json.loads(out.read_text())
    assert res["accept_length"] == 2.5 and res["server_info"]["internal_states"] == [{"avg_spec_accept_length": 2.5}]


def test_range_ratio_gives_sglangs_interval() -> None:
    """SGLang draws lengths uniformly in [max(int(n * r), 1), n]; the translated centre and half-width give the
    same upper bound in lmmbench's [c(1 - h), c(1 + h)] and the same lower one, or one token lower when the two
    bounds' sum is odd (an integer centre cannot sit between them), as docs/perf.md says."""
    import math

    for full, ratio in ((1024, 0.5), (1024, 0.0), (100, 0.25), (7, 0.9), (16, 1.0), (1000, 0.999)):
        centre, half = _lengths(full, ratio)
        low = max(int(full * ratio), 1)
        assert math.ceil(centre * (1 + half)) == full and 0 <= half < 1
        expected_low = low if low == full else max(1, low - (low + full) % 2)
        assert max(1, math.floor(centre * (1 - half))) == expected_low


def test_every_flag_not_carried_is_refused_by_name() -> None:
    defaults = vars(build_parser().parse_args([]))
    for flag in SGLANG_FLAGS:
        if flag["dest"] in CARRIED:
            continue
        ns = build_parser().parse_args([])
        setattr(ns, flag["dest"], "a value other than SGLang's default")
        with pytest.raises(UserError, match=re.escape(flag["flags"][0])) as err:
            translate(ns)
        if flag["dest"] in IN_SGLANG_ONLY:
            assert "refused:" in str(err.value)
        assert defaults[flag["dest"]] == build_parser().parse_args([]).__dict__[flag["dest"]]


@pytest.mark.parametrize("backend", sorted(REFUSED_BACKENDS))
def test_backends_lmmbench_cannot_speak_are_refused_by_name(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "sglang", "--backend", backend]) == 2
    assert f"--backend {backend}: refused:" in capsys.readouterr().err


def test_logprob_flags_reach_the_request_body_as_sglang_sends_them() -> None:
    def extra(line: str) -> dict[str, object]:
        return translate(build_parser().parse_args(shlex.split(line)))["extra_body"]  # type: ignore[no-any-return]

    assert extra("--backend sglang --return-logprob --top-logprobs-num 3 --logprob-start-len 0") == {
        "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 3}
    assert extra("--backend sglang-oai --return-logprob --top-logprobs-num 3") == {"logprobs": 3}
    assert extra("--backend vllm-chat --return-logprob --top-logprobs-num 3") == {}
    line = """--backend sglang --return-routed-experts --extra-request-body '{"return_routed_experts": false}'"""
    assert extra(line) == {"return_routed_experts": False}  # the extra body wins, as in SGLang


def test_parser_is_sglangs() -> None:
    """Defaults, prefix abbreviations, choices and SGLang's goodput type."""
    ns = build_parser().parse_args(shlex.split("--random-input 5 --num-prompt 7 --goodput ttft:500 tpot:50"))
    assert (ns.random_input_len, ns.num_prompts, ns.goodput) == (5, 7, [("ttft", 500.0), ("tpot", 50.0)])
    d = build_parser().parse_args([])
    assert (d.backend, d.dataset_name, d.num_prompts, d.request_rate, d.seed, d.warmup_requests) == (
        "sglang", "sharegpt", 1000, float("inf"), 42, 1)
    cfg = translate(d)
    assert cfg["url"] == "http://0.0.0.0:30000" and cfg["endpoint"] == "generate" and cfg["ignore_eos"] is True
    assert translate(build_parser().parse_args(["--backend", "vllm"]))["url"] == "http://0.0.0.0:8000"
    for bad in (["--backend", "nope"], ["--goodput", "itl:5"], ["--flush-cache-timeout", "0"]):
        with pytest.raises(UserError, match=rf"^{bad[0]}: .*; see lmmbench bench sglang --help$"):  # one line
            build_parser().parse_args(bad)
