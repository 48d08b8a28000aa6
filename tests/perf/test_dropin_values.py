"""Every value of the drop-ins (`bench serve`: vLLM's flags, `bench sglang`: SGLang's) is checked before the server
is contacted: a bad one is exit 2, one line naming the flag (or the data file and its row), and the test server
saw no request. Data-set rows are real files written here; the limits table reaches every count, length and size
the drop-ins generate or read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import build_word_tokenizer, running_testserver
from lmmbench.testing.fixtures import server_received
from pacer import returns_before_pacer


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    port = free_loopback_port()
    with running_testserver(TestServerConfig(port=port, accept_any_model=True)) as url:
        yield url, port


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_word_tokenizer(tmp_path_factory.mktemp("tok"), [])


def _vllm(port: int, tok: Path, out: Path) -> list[str]:
    return ["bench", "serve", "--base-url", f"http://127.0.0.1:{port}", "--model", "m", "--tokenizer", str(tok),
            "--random-input-len", "8", "--random-output-len", "4", "--num-prompts", "2", "--result-dir", str(out)]


def _sglang(port: int, tok: Path, out: Path) -> list[str]:
    return ["bench", "sglang", "--port", str(port), "--tokenizer", str(tok), "--dataset-name", "random",
            "--random-input-len", "8", "--random-output-len", "4", "--num-prompts", "2", "--output-file",
            str(out / "o.jsonl")]  # fmt: skip


def _refused(server: tuple[str, int], capsys: pytest.CaptureFixture[str], argv: list[str], says: str,
             before_the_server: bool = True) -> None:  # fmt: skip
    url, _ = server
    before = len(server_received(url))
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    if not before_the_server:  # lmmbench's own data-set reader (perf's), after its probes' progress lines
        err = [line for line in err if line.startswith("error:")]
    assert code == 2 and len(err) == 1 and says in err[0], (code, err)
    if before_the_server:
        assert len(server_received(url)) == before, "the server was contacted before the value was checked"


SGLANG_BAD = [
    (["--request-rate", "-1"], "--request-rate -1.0: must be > 0"),
    (["--request-rate", "0"], "--request-rate 0.0: must be > 0"),
    (["--request-rate", "nan"], "--request-rate nan"),
    (["--num-prompts", "-3"], "--num-prompts -3: must be >= 1"),
    (["--max-concurrency", "0"], "--max-concurrency 0: must be >= 1"),
    (["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "0"], "--gsp-num-groups 0: must be >= 1"),
    (["--warmup-requests", "-2"], "--warmup-requests -2: must be >= 0"),
    (["--random-range-ratio", "7"], "--random-range-ratio 7.0: must be >= 0 and <= 1"),
    (["--random-range-ratio", "2"], "--random-range-ratio 2.0"),  # not "--random-input-len ...: too small"
    (["--header", "novalue"], "--header 'novalue': expected KEY=VALUE"),
    (["--port", "70000"], "--port 70000: a TCP port is 1 to 65535"),
    (["--num-prompts", "100000000000"], "--num-prompts: 1e+11 exceeds the limit requests"),
    (["--dataset-name", "image", "--image-resolution", "100000x100000"], "exceeds the limit image_side"),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "says"), SGLANG_BAD, ids=[" ".join(e) for e, _ in SGLANG_BAD])
def test_sglang_values_refused_before_the_server(server: tuple[str, int], tok: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str], extra: list[str],
                                                 says: str) -> None:  # fmt: skip
    argv = _sglang(server[1], tok, tmp_path)
    if "--port" in extra:
        argv[argv.index("--port") + 1] = extra[1]
        extra = []
    _refused(server, capsys, [*argv, *extra], says)


def test_sglang_output_file_in_a_missing_folder_is_refused_before_the_load(
        server: tuple[str, int], tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = _sglang(server[1], tok, tmp_path)
    argv[-1] = str(tmp_path / "missing" / "o.jsonl")
    _refused(server, capsys, argv, "the folder")


VLLM_BAD = [
    (["--burstiness", "0", "--request-rate", "5"], "--burstiness 0.0: must be > 0"),
    (["--burstiness", "-1", "--request-rate", "5"], "--burstiness -1.0: must be > 0"),
    (["--burstiness", "nan", "--request-rate", "5"], "--burstiness nan"),
    (["--request-rate", "nan"], "--request-rate nan"),
    (["--percentile-metrics", "ttft,latency,bogus"], "'latency' is not one of vLLM's metrics"),
    (["--metric-percentiles", "101"], "--metric-percentiles 101"),
    (["--num-warmups", "-1"], "--num-warmups -1: must be >= 0"),
    (["--random-output-len", "0"], "--random-output-len 0: must be >= 1"),
    (["--extra-body", "[1,2]"], "--extra-body: expected a JSON object, got list"),
    (["--goodput", "ttft:-5"], "--goodput ttft:-5: an SLO is a non-negative number"),
    (["--probe-request-rate", "-2"], "--probe-request-rate -2.0: must be >= 0"),
    (["--metadata", "backend=evil", "num_prompts=999"], "--metadata backend=evil: 'backend' is a key lmmbench"),
    (["--metadata", "p99_ttft_ms=1"], "'p99_ttft_ms' is a key lmmbench"),
    (["--num-prompts", "100000000000"], "--num-prompts: 1e+11 exceeds the limit requests"),
    (["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "1000000000"],
     "--prefix-repetition-prefix-len: 1e+09 exceeds the limit input_tokens"),
    (["--dataset-name", "random-mm", "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
      "--random-mm-bucket-config", "{(100000, 100000, 1): 1.0}"], "exceeds the limit image_side"),
    (["--random-range-ratio", "7"], "--random-range-ratio 7: 7: must be >= 0 and < 1"),
    (["--header", "novalue"], "--header 'novalue': expected KEY=VALUE"),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "says"), VLLM_BAD, ids=[" ".join(e)[:40] for e, _ in VLLM_BAD])
def test_vllm_values_refused_before_the_server(server: tuple[str, int], tok: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str], extra: list[str],
                                               says: str) -> None:  # fmt: skip
    _refused(server, capsys, [*_vllm(server[1], tok, tmp_path), *extra], says)


def test_vllm_port_outside_the_tcp_range(server: tuple[str, int], tok: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    argv = _vllm(server[1], tok, tmp_path)
    argv[argv.index("--base-url"):argv.index("--base-url") + 2] = ["--port", "70000"]
    _refused(server, capsys, argv, "--port 70000: a TCP port is 1 to 65535")


def test_the_limits_table_reaches_random_mm(server: tuple[str, int], tok: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """LMMBENCH_LIMIT_IMAGE_SIDE bounds random-mm's buckets as it bounds media synth."""
    monkeypatch.setenv("LMMBENCH_LIMIT_IMAGE_SIDE", "100")
    argv = [*_vllm(server[1], tok, tmp_path), "--dataset-name", "random-mm", "--backend", "openai-chat",
            "--endpoint", "/v1/chat/completions", "--random-mm-bucket-config", "{(128, 64, 1): 1.0}"]  # fmt: skip
    _refused(server, capsys, argv, "128 exceeds the limit image_side=100")


def _rows(path: Path, rows: list[object] | object, lines: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in rows) if lines else json.dumps(rows)  # type: ignore[union-attr]
    path.write_text(text, encoding="utf-8")
    return path


def test_vllm_data_set_rows_named(server: tuple[str, int], tok: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    base = _vllm(server[1], tok, tmp_path)
    good = {"conversations": [{"from": "human", "value": "a b c d e"}, {"from": "gpt", "value": "f g h i"}]}
    sg = _rows(tmp_path / "sg.json", [good, {"conversations": "hello there"}])
    _refused(server, capsys, [*base, "--dataset-name", "sharegpt", "--dataset-path", str(sg)],
             "sg.json: row 2: 'conversations' is str, expected a list of turns")
    one = _rows(tmp_path / "one.json", good)
    _refused(server, capsys, [*base, "--dataset-name", "sharegpt", "--dataset-path", str(one)],
             "a ShareGPT file is a JSON list")
    custom = ["--dataset-name", "custom", "--skip-chat-template", "--custom-output-len", "-1", "--dataset-path"]
    for prompt, kind in ((5, "int"), (["a", "b"], "list")):
        path = _rows(tmp_path / f"c_{kind}.jsonl", [{"prompt": prompt, "output_tokens": 2}], lines=True)
        says = f"c_{kind}.jsonl:1: 'prompt' is {kind}, expected a string"
        _refused(server, capsys, [*base, *custom, str(path)], says)
    huge = _rows(tmp_path / "huge.jsonl", [{"prompt": "a b", "output_tokens": 1e11}], lines=True)
    _refused(server, capsys, [*base, *custom, str(huge)], "'output_tokens': 1e+11 exceeds the limit output_tokens")
    trace = _rows(tmp_path / "trace.jsonl", [{"timestamp": 0, "input_length": 4, "output_length": 1e11,
                                              "hash_ids": [1]}], lines=True)  # fmt: skip
    _refused(server, capsys, [*base, "--dataset-name", "timed_trace", "--backend", "vllm", "--dataset-path",
                              str(trace)], "trace.jsonl: row 1: 'output_length': 1e+11 exceeds the limit output_tokens")
    burst = tmp_path / "burst.csv"
    burst.write_text('Timestamp,Model,Request tokens,Response tokens\n0,GPT-4,"12,5\n1,GPT-4,3,4\n')
    _refused(server, capsys, [*base, "--dataset-name", "burstgpt", "--dataset-path", str(burst)],
             "burst.csv")
    burst.write_text("Timestamp,Model,Request tokens,Response tokens\n0,GPT-4,100000000000,5\n")
    _refused(server, capsys, [*base, "--dataset-name", "burstgpt", "--dataset-path", str(burst)],
             "burst.csv:2: 'Request tokens': 1e+11 exceeds the limit input_tokens")


def test_sglang_data_set_rows_named(server: tuple[str, int], tok: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    base = _sglang(server[1], tok, tmp_path)
    good = {"conversations": [{"from": "human", "value": "a b c d e"}, {"from": "gpt", "value": "f g h i"}]}
    sg = _rows(tmp_path / "sg.json", [good, {"conversations": "hello there"}])
    _refused(server, capsys, [*base, "--dataset-name", "sharegpt", "--dataset-path", str(sg)],
             "sg.json: row 2: 'conversations' is str, expected a list of turns", before_the_server=False)
    _refused(server, capsys, [*base, "--dataset-name", "sharegpt", "--dataset-path", str(sg), "--prompt-suffix", "x"],
             "sg.json: row 2: 'conversations' is str, expected a list of turns")  # SGLang's own loader draws
    one = _rows(tmp_path / "one.json", good)
    _refused(server, capsys, [*base, "--dataset-name", "sharegpt", "--dataset-path", str(one)],
             "a ShareGPT file is a JSON list of {'conversations': [...]} objects, not a single object")
    trace = _rows(tmp_path / "trace.jsonl", [{"timestamp": 0, "hash_ids": [1], "output_length": 2},
                                             {"timestamp": "soon", "hash_ids": [2], "output_length": 2}], lines=True)
    mooncake = ["--dataset-name", "mooncake", "--backend", "sglang", "--dataset-path", str(trace)]
    _refused(server, capsys, [*base, *mooncake], "trace.jsonl: record 2: 'timestamp' 'soon'")


def test_a_huge_sharegpt_turn_is_dropped_without_being_encoded(tmp_path: Path) -> None:
    """vLLM drops a ShareGPT prompt over 1024 tokens; a 4 MB turn (about 16 s to encode here) is dropped from its
    first 64 KiB's pre-tokens, and the claim holds against the real encoding of a smaller text."""

    from lmmbench.datasets.vllm.samplers import VllmRng, VllmTokenizer, sample_sharegpt
    from lmmbench.testing.sampler_tokenizer import build_sampler_tokenizer

    tok = VllmTokenizer.load(build_sampler_tokenizer(tmp_path / "stok"))
    words = "the quick brown fox jumps over a lazy dog "
    mid = (words * 2000)[:70_000]
    assert tok.surely_longer_than(mid, 1024) and len(tok.encode(mid, add_special_tokens=True)) > 1024
    assert not tok.surely_longer_than("x" * 70_000, 1024)  # one pre-token: the prefix cannot tell
    rows = [{"conversations": [{"from": "human", "value": (words * 100_000)[:4_000_000]},
                               {"from": "gpt", "value": "ok " * 10}]},
            {"conversations": [{"from": "human", "value": "a b c d e f"}, {"from": "gpt", "value": "g h i j k"}]}]
    path = _rows(tmp_path / "big.json", rows)
    # done before a pacer of 10 fresh CLI imports finishes: the 4 MB turn is judged too long from its prefix;
    # tokenizing it whole would lose the race
    out, quickly = returns_before_pacer(lambda: sample_sharegpt(tok, VllmRng(0), path, 2), imports=10)
    assert quickly and {s.prompt for s in out} == {"a b c d e f"}


def test_metadata_never_overwrites_a_measured_key_in_the_result_file() -> None:
    """`lmmbench perf --metadata` reaches the same writer without the drop-in's refusal: its keys go first."""
    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.reports.vllm_result_file import vllm_result

    cfg = PerfConfig.model_validate({"url": "http://127.0.0.1:1", "num_requests": 3, "backend": "openai",
                                     "metadata": {"backend": "evil", "num_prompts": "999", "tp": "1"}})  # fmt: skip
    out = vllm_result(cfg, [], "m", 1.0, "20260101-000000")
    assert (out["backend"], out["num_prompts"], out["tp"]) == ("openai", 3, "1")
