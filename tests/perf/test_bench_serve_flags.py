"""Every flag `lmmbench bench serve` accepts changes what is sent (the request bytes as the HTTP client encodes
them), when it is sent (the schedule) or what is written, as the flag does in vLLM 0.33.0; every other flag of
vLLM's parser is refused with the reason. No server is needed: the requests are built, then encoded by the
client that sends them (the runs against `lmmbench testserver` are in test_bench_serve.py)."""

from __future__ import annotations

import base64
import io
import itertools
import json
import random
import re
import shlex
import statistics
from pathlib import Path
from typing import Any

import pytest

from lmmbench.backends.openai_http import OpenAIHttpClient
from lmmbench.config.dropins.vllm_serve import _CARRIED, IN_VLLM_ONLY, VLLM_FLAGS, build_parser, translate
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest
from lmmbench.sessions.dropins.vllm_session import build_bench_requests
from lmmbench.testing.sampler_tokenizer import build_sampler_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sampler_tokenizer(tmp_path_factory.mktemp("tok"))


def _build(line: str, tok: Path) -> tuple[dict[str, Any], list[PerfRequest]]:
    ns = build_parser().parse_args([*shlex.split(line), "--tokenizer", str(tok)])
    cfg = translate(ns)
    return cfg, build_bench_requests(ns)[0]


def _wire(req: PerfRequest, url: str = "http://127.0.0.1:8000") -> tuple[str, dict[str, str], dict[str, Any]]:
    """The request line, headers and JSON body the client writes for ``req``."""
    raw = OpenAIHttpClient(url, "default-model").encode(req)
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    hdrs = dict(line.split(": ", 1) for line in lines[1:])
    return lines[0], hdrs, json.loads(body)


def test_completions_request_as_vllm_writes_it(tok: Path) -> None:
    cfg, reqs = _build("--model m --num-prompts 3 --random-input-len 12 --random-output-len 5 "
                       "--request-id-prefix run7- --header x-a=1 'x-b = two' --logprobs 2", tok)  # fmt: skip
    assert len(reqs) == 3 and cfg["num_requests"] == 3
    line, hdrs, body = _wire(reqs[1])
    assert line == "POST /v1/completions HTTP/1.1"
    assert hdrs["x-request-id"] == "run7-1" and hdrs["x-a"] == "1" and hdrs["x-b"] == "two"
    assert body["model"] == "m" and isinstance(body["prompt"], str)
    assert (body["repetition_penalty"], body["max_tokens"], body["logprobs"]) == (1.0, 5, 2)
    assert body["ignore_eos"] is True and "min_tokens" not in body  # vLLM: random datasets ignore EOS, no min_tokens
    assert body["stream"] is True and body["stream_options"]["include_usage"] is True
    assert reqs[1].input_tokens == 12 - 1  # the tokenizer adds <s>: vLLM samples input_len - 1 tokens


def test_chat_request_and_served_model_name(tok: Path) -> None:
    cfg, reqs = _build("--backend openai-chat --endpoint /v1/chat/completions --model org/m --served-model-name "
                       "srv --num-prompts 2 --random-input-len 8 --random-output-len 4", tok)  # fmt: skip
    line, _, body = _wire(reqs[0])
    assert line == "POST /v1/chat/completions HTTP/1.1" and cfg["model"] == "srv" and body["model"] == "srv"
    assert body["messages"][0]["role"] == "user" and body["messages"][0]["content"][0]["type"] == "text"
    assert body["max_completion_tokens"] == 4 and "max_tokens" not in body
    with pytest.raises(UserError, match="calls /v1/chat/completions"):
        _build("--backend openai-chat --model m", tok)  # vLLM refuses a chat backend on the completions URL


def test_sampling_flags_then_extra_body_reach_the_body(tok: Path) -> None:
    _, reqs = _build("--model m --num-prompts 1 --random-input-len 8 --temperature=0.3 --top-p=0.75 --top-k 10 "
                     "--min-p 0.1 --frequency-penalty 0.2 --presence-penalty 0.4 --repetition-penalty 1.3 "
                     """--extra-body '{"chat_template_kwargs": {"enable_thinking": false}, "top_k": 3}'""",
                     tok)  # fmt: skip
    body = _wire(reqs[0])[2]
    assert (body["temperature"], body["top_p"], body["min_p"]) == (0.3, 0.75, 0.1)
    assert (body["frequency_penalty"], body["presence_penalty"], body["repetition_penalty"]) == (0.2, 0.4, 1.3)
    assert body["top_k"] == 3 and body["chat_template_kwargs"] == {"enable_thinking": False}  # extra body wins


def test_lora_modules_pick_the_model_per_request(tok: Path) -> None:
    _, reqs = _build("--model base --num-prompts 6 --random-input-len 8 --lora-modules a b c "
                     "--lora-assignment round-robin", tok)  # fmt: skip
    assert [_wire(r)[2]["model"] for r in reqs] == ["a", "b", "c", "a", "b", "c"]
    _, reqs = _build("--model base --num-prompts 40 --random-input-len 8 --seed 5 --lora-modules a b c", tok)
    rng = random.Random(5)  # vLLM: random.seed(seed), then one random.choice per request
    assert [_wire(r)[2]["model"] for r in reqs] == [rng.choice(["a", "b", "c"]) for _ in range(40)]


def test_lengths_seed_prefix_and_range_ratio(tok: Path) -> None:
    _, a = _build("--model m --num-prompts 30 --random-input-len 21 --random-output-len 10 "
                  "--random-range-ratio 0.5 --random-prefix-len 6", tok)  # fmt: skip
    ins, outs = [r.input_tokens or 0 for r in a], [r.output_tokens or 0 for r in a]
    assert min(ins) >= 6 + 10 - 2 and max(ins) <= 6 + 30 + 2 and len(set(ins)) > 5  # prefix + U[10, 30] (+-cut)
    assert min(outs) >= 5 and max(outs) <= 15 and len(set(outs)) > 3
    assert len({_wire(r)[2]["prompt"][:4] for r in a}) == 1  # the shared prefix: the same first characters
    _, b = _build("--model m --num-prompts 30 --random-input-len 21 --random-output-len 10 --seed 1", tok)
    _, c = _build("--model m --num-prompts 30 --random-input-len 21 --random-output-len 10", tok)
    assert [r.payload["prompt"] for r in b] != [r.payload["prompt"] for r in c]
    _, d = _build("--model m --num-prompts 4 --input-len 9 --output-len 3", tok)
    assert {r.output_tokens for r in d} == {3} and all(abs((r.input_tokens or 0) - 8) <= 1 for r in d)
    _, e = _build("""--model m --num-prompts 30 --random-input-len 21 --random-output-len 10 """
                  """--random-range-ratio '{"input": 0, "output": 0.5}'""", tok)  # fmt: skip
    e_in = [r.input_tokens or 0 for r in e]  # input ratio 0: only the re-encoding drift of a byte-level BPE
    assert max(e_in) - min(e_in) <= 3 and len({r.output_tokens for r in e}) > 3


def test_schedule_is_vllms_rescaled_gamma_and_ramp_up(tok: Path) -> None:
    _, reqs = _build("--model m --num-prompts 100 --random-input-len 4 --request-rate 20", tok)
    t = [r.arrival_ns or 0 for r in reqs]
    assert t[-1] == pytest.approx(100 / 20 * 1e9, abs=1e3) and t == sorted(t) and t[0] > 0  # ends at n / rate
    _, same = _build("--model m --num-prompts 100 --random-input-len 4 --request-rate 20", tok)
    assert [r.arrival_ns for r in same] == t  # numpy's generator seeded with --seed
    _, inf = _build("--model m --num-prompts 10 --random-input-len 4", tok)
    assert {r.arrival_ns for r in inf} == {0}  # vLLM's default rate: inf, all at once
    _, even = _build("--model m --num-prompts 11 --random-input-len 4 --request-rate 10 --burstiness inf", tok)
    gaps = [(b.arrival_ns or 0) - (a.arrival_ns or 0) for a, b in itertools.pairwise(even)]
    assert all(g == pytest.approx(1e8, abs=2) for g in gaps)
    cfg, ramp = _build("--model m --num-prompts 400 --random-input-len 4 --ramp-up-strategy linear "
                       "--ramp-up-start-rps 10 --ramp-up-end-rps 100 --burstiness inf", tok)  # fmt: skip
    gaps = [(b.arrival_ns or 0) - (a.arrival_ns or 0) for a, b in itertools.pairwise(ramp)]
    assert gaps[0] == pytest.approx(1e9 / (10 + 90 / 399), rel=1e-6) and gaps[-1] == pytest.approx(1e7, rel=1e-6)
    assert "rate" not in cfg
    with pytest.raises(UserError, match="ramp-up"):
        _build("--model m --request-rate 5 --ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 2", tok)


def test_burstiness_0_2_gives_gamma_gaps_with_cv_2_2(tok: Path) -> None:
    """vLLM draws the gaps from gamma(shape=burstiness): a coefficient of variation of 1/sqrt(0.2) = 2.24;
    rescaling to n / rate leaves it. Over 20,000 gaps its sampling error is a few percent."""
    from lmmbench.datasets.vllm.bench_requests import vllm_schedule_s
    from lmmbench.datasets.vllm.samplers import VllmRng

    ns = build_parser().parse_args(["--request-rate", "100", "--burstiness", "0.2"])
    t = vllm_schedule_s(20_001, ns, VllmRng(0).np)
    gaps = [b - a for a, b in itertools.pairwise(t)]
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(0.2**-0.5, rel=0.08)
    assert t[-1] == pytest.approx(20_001 / 100)


def test_random_mm_requests_carry_the_asked_images(tok: Path) -> None:
    from PIL import Image

    _, reqs = _build("--backend openai-chat --endpoint /v1/chat/completions --model m --dataset-name random-mm "
                     "--num-prompts 8 --random-input-len 10 --random-output-len 3 "
                     "--random-mm-base-items-per-request 2 --random-mm-num-mm-items-range-ratio 0.5 "
                     """--random-mm-limit-mm-per-prompt '{"image": 3, "video": 0}' """
                     "--random-mm-bucket-config '{(24, 32, 1): 0.5, (16, 16, 1): 0.5, (8, 8, 4): 0.0}'",
                     tok)  # fmt: skip
    counts = []
    for r in reqs:
        parts = _wire(r)[2]["messages"][0]["content"]
        assert parts[0]["type"] == "text"
        images = [p for p in parts[1:] if p["type"] == "image_url"]
        counts.append(len(images))
        for p in images:
            url = p["image_url"]["url"]
            assert url.startswith("data:image/jpeg;base64,")
            size = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size
            assert size in ((32, 24), (16, 16))  # (width, height) of the (height, width, 1) buckets
    assert set(counts) <= {1, 2, 3} and len(set(counts)) > 1  # 2 +- 50 %, at most 3
    with pytest.raises(UserError, match="openai-chat"):
        _build("--model m --dataset-name random-mm", tok)
    _, mmchat = _build("--backend openai-chat --endpoint /v1/chat/completions --model m --dataset-name random-mm "
                       "--num-prompts 1 --random-input-len 6 --enable-multimodal-chat "
                       "--random-mm-bucket-config '{(8, 8, 1): 1.0}'", tok)  # fmt: skip
    first = _wire(mmchat[0])[2]["messages"][0]["content"][0]
    assert list(first) == ["text", "type"]  # vLLM's multimodal chat transformation writes text first


def test_prefix_repetition_flags(tok: Path) -> None:
    _, reqs = _build("--model m --dataset-name prefix_repetition --num-prompts 12 --prefix-repetition-prefix-len 10 "
                     "--prefix-repetition-suffix-len 5 --prefix-repetition-num-prefixes 3 "
                     "--prefix-repetition-output-len 7", tok)  # fmt: skip
    assert len(reqs) == 12 and {r.output_tokens for r in reqs} == {7}
    assert min(r.input_tokens or 0 for r in reqs) >= 15 and "x-request-id" not in reqs[0].headers  # vLLM: no id
    from lmmbench.datasets.vllm.samplers import VllmTokenizer

    vt = VllmTokenizer.load(tok)
    prefixes = {tuple(vt.encode(r.payload["prompt"])[:8]) for r in reqs}
    assert len(prefixes) == 3
    _, ordered = _build("--model m --dataset-name prefix_repetition --num-prompts 12 --prefix-repetition-prefix-len "
                        "10 --prefix-repetition-num-prefixes 3 --disable-shuffle", tok)  # fmt: skip
    firsts = [tuple(vt.encode(r.payload["prompt"])[:8]) for r in ordered]
    assert firsts[0] == firsts[3] and len(set(firsts[:4])) == 1 and firsts[4] != firsts[0]  # prefix by prefix


def _sharegpt(tmp: Path) -> Path:
    rows = [{"conversations": [{"from": "human", "value": f"tell me about the number {i} " * (i % 4 + 1)},
                               {"from": "gpt", "value": "it is a number " * (i % 3 + 2)}]} for i in range(6)]
    path = tmp / "sg.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def test_sharegpt_and_custom_flags(tok: Path, tmp_path: Path) -> None:
    sg = _sharegpt(tmp_path)
    _, reqs = _build(f"--model m --dataset-name sharegpt --dataset-path {sg} --num-prompts 10", tok)
    assert len(reqs) == 10 and not reqs[0].payload.get("ignore_eos")  # oversampled to 10; EOS respected
    _, few = _build(f"--model m --dataset-name sharegpt --dataset-path {sg} --num-prompts 10 --no-oversample", tok)
    assert len(few) == 6
    _, plain = _build(f"--model m --dataset-name sharegpt --dataset-path {sg} --num-prompts 6 --disable-shuffle "
                      "--sharegpt-output-len 9", tok)  # fmt: skip
    assert [r.payload["prompt"].split()[5] for r in plain] == [str(i) for i in range(6)]  # the file's order
    assert {r.payload["max_tokens"] for r in plain} == {9}
    custom = tmp_path / "data.jsonl"
    custom.write_text("".join(json.dumps({"prompt": f"capital {i}?", "output_tokens": i + 2}) + "\n"
                              for i in range(4)), encoding="utf-8")  # fmt: skip
    _, c = _build(f"--model m --dataset-name custom --dataset-path {custom} --skip-chat-template --num-prompts 4 "
                  "--custom-output-len -1 --disable-shuffle", tok)  # fmt: skip
    assert [(r.payload["prompt"], r.payload["max_tokens"]) for r in c] == [(f"capital {i}?", i + 2) for i in range(4)]
    with pytest.raises(UserError, match="--skip-chat-template"):  # vLLM applies the tokenizer's chat template
        _build(f"--model m --dataset-name custom --dataset-path {custom}", tok)
    templated = tmp_path / "tok"
    templated.mkdir()
    (templated / "tokenizer.json").write_text((tok / "tokenizer.json").read_text())
    (templated / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% for m in messages %}[{{ m.content }}]{% endfor %}{% if think %}<t>{% endif %}"}))  # noqa: E501
    ns = build_parser().parse_args(shlex.split(f"--model m --dataset-name custom --dataset-path {custom} "
                                               """--num-prompts 1 --chat-template-kwargs '{"think": true}' """
                                               f"--tokenizer {templated}"))  # fmt: skip
    translate(ns)
    assert build_bench_requests(ns)[0][0].payload["prompt"].endswith("?]<t>")


def test_translated_options(tok: Path) -> None:
    cfg, _ = _build("--base-url http://h:1 --model m --num-prompts 2 --random-input-len 4 --max-concurrency 3 "
                    "--num-warmups 2 --save-detailed --label L --metadata a=1 b=2 --percentile-metrics ttft,e2el "
                    "--metric-percentiles 50,99 --goodput ttft:500 tpot:50 --disable-tqdm "
                    "--ready-check-timeout-sec 7 --request-rate 3 --burstiness 0.5", tok)  # fmt: skip
    assert (cfg["url"], cfg["concurrency"], cfg["warmup_requests"], cfg["save_detailed"]) == ("http://h:1", 3, 2, True)
    assert cfg["label"] == "L" and cfg["metadata"] == {"a": "1", "b": "2"}
    assert cfg["percentile_metrics"] == ["ttft", "e2el"] and cfg["percentiles"] == [50.0, 99.0]
    assert cfg["slo"] == {"ttft_ms": 500.0, "tpot_ms": 50.0} and cfg["progress"] is False
    assert (cfg["wait_for_server"], cfg["rate"], cfg["burstiness"]) == (7.0, 3.0, 0.5)
    assert translate(build_parser().parse_args(["--host", "h", "--port", "9"]))["url"] == "http://h:9"
    defaults = translate(build_parser().parse_args([]))
    assert defaults["num_requests"] == 1000 and defaults["endpoint"] == "completions"
    assert defaults["rate"] == float("inf") and defaults["url"] == "http://127.0.0.1:8000"
    assert defaults["ignore_eos"] is True  # vLLM's default dataset is random, which ignores EOS
    assert build_parser().parse_args(["--num-prom", "5"]).num_prompts == 5  # argparse's prefix abbreviation
    assert build_parser().parse_args(["--request-rate=4"]).request_rate == 4.0
    assert build_parser().parse_args([]).request_id_prefix != build_parser().parse_args([]).request_id_prefix


def test_flags_vllm_serve_does_not_act_on_change_nothing(tok: Path) -> None:
    """--use-beam-search is parsed and never read by vLLM's serve benchmark; --trust-remote-code only allows a
    tokenizer's own Python, which lmmbench's tokenizer.json reader never runs: the same requests either way."""
    line = "--model m --num-prompts 3 --random-input-len 8"
    plain = [r.payload for r in _build(line, tok)[1]]
    assert [r.payload for r in _build(line + " --use-beam-search --trust-remote-code", tok)[1]] == plain


@pytest.mark.parametrize("flag", [f for f in VLLM_FLAGS if f["dest"] not in _CARRIED], ids=lambda f: f["flags"][0])
def test_every_flag_not_carried_is_refused_by_name(flag: dict[str, Any]) -> None:
    ns = build_parser().parse_args([])
    setattr(ns, str(flag["dest"]), "a value other than vLLM's default")
    with pytest.raises(UserError, match=re.escape(str(flag["flags"][0]))):
        translate(ns)


def test_refusals_say_why(capsys: pytest.CaptureFixture[str]) -> None:
    from lmmbench.cli.main import main

    assert main(["bench", "serve", "--tokenizer-mode", "slow"]) == 2
    assert "inside vLLM's own process" in capsys.readouterr().err
    assert main(["bench", "serve", "--backend", "openai-embeddings"]) == 2
    assert "embeddings" in capsys.readouterr().err
    assert set(IN_VLLM_ONLY) <= {f["dest"] for f in VLLM_FLAGS}


def test_result_keys_measure_lmmbench_way_under_vllm_names() -> None:
    """vLLM's itls are per chunk and its TTFT starts after the wait for a slot; the result file keeps the names
    and measures per token, from the scheduled time (from the slot when every request is due at once)."""
    from lmmbench.metrics.vllm_result import vllm_benchmark_result
    from lmmbench.testing import make_record

    rec = make_record(ttft_ms=20.0, chunk_gaps_ms=[6.0, 2.0], chunk_tokens=[1, 3, 1])  # 3 tokens in one chunk
    rec.slot_ns = rec.scheduled_ns + 50_000_000  # waited 50 ms for a concurrency slot
    rec.first_token_ns += 50_000_000
    rec.chunk_times_ns = [t + 50_000_000 for t in rec.chunk_times_ns]
    rec.end_ns += 50_000_000
    res = vllm_benchmark_result([rec], duration_s=1.0, detailed=True, percentile_metrics=("ttft", "itl", "e2el"))
    assert res["itls"][0] == pytest.approx([0.002, 0.002, 0.002, 0.002])  # vLLM: [0.006, 0.002]
    assert res["ttfts"][0] == pytest.approx(0.070) and res["mean_e2el_ms"] == pytest.approx(78.0)
    closed = vllm_benchmark_result([rec], duration_s=1.0, detailed=True, from_scheduled=False)
    assert closed["ttfts"][0] == pytest.approx(0.020)


def test_insecure_turns_the_certificate_check_off() -> None:
    import ssl

    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.loadgen.api import _client_kwargs
    from lmmbench.loadgen.protocol import make_client

    for flag, mode in (([], ssl.CERT_REQUIRED), (["--insecure"], ssl.CERT_NONE)):
        opts = translate(build_parser().parse_args(["--base-url", "https://h:8443", "--model", "m", *flag]))
        cfg = PerfConfig.model_validate(opts)
        client = make_client("openai-http", **_client_kwargs(cfg, "m", True))
        assert client._ssl is not None and client._ssl.verify_mode == mode  # type: ignore[attr-defined]


def test_custom_image_rows_and_client_side_data(tok: Path, tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (12, 8), (200, 10, 10)).save(tmp_path / "a.jpg")
    rows = [{"prompt": "how many?", "image_files": [str(tmp_path / "a.jpg"), "http://h/b.png"]},
            {"content": [{"type": "text", "text": "compare "}, {"type": "image", "image": str(tmp_path / "a.jpg")},
                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}}]}]
    data = tmp_path / "img.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    line = ("--backend openai-chat --endpoint /v1/chat/completions --model m --dataset-name custom_image "
            f"--dataset-path {data} --num-prompts 2 --disable-shuffle --custom-output-len 7")
    _, reqs = _build(line, tok)
    first, second = (_wire(r)[2]["messages"][0]["content"] for r in reqs)
    assert first[0] == {"type": "text", "text": "how many?"}
    assert [p["image_url"]["url"] for p in first[1:]] == [f"file://{tmp_path / 'a.jpg'}", "http://h/b.png"]
    assert [p["type"] for p in second] == ["text", "image_url", "image_url"]
    assert second[2]["image_url"]["detail"] == "low"
    assert {r.payload["max_completion_tokens"] for r in reqs} == {7}
    only_local = tmp_path / "local.jsonl"
    only_local.write_text(json.dumps({"prompt": "p", "image_files": [str(tmp_path / "a.jpg")]}) + "\n")
    _, local = _build(line.replace(str(data), str(only_local)).replace("--num-prompts 2", "--num-prompts 1")
                      + " --custom-ensure-client-side-data", tok)  # fmt: skip
    url = _wire(local[0])[2]["messages"][0]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")  # loaded here and sent as data, as vLLM's flag does
    assert Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size == (12, 8)
    with pytest.raises(UserError, match="openai-chat"):
        _build(f"--model m --dataset-name custom_image --dataset-path {data}", tok)


def test_timed_trace_replays_its_timestamps(tok: Path, tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 20, "output_length": 3, "hash_ids": [1, 2]},
            {"timestamp": 250, "input_length": 12, "output_length": 4, "hash_ids": [1, 7]},
            {"timestamp": 900, "input_length": 8, "output_length": 5, "hash_ids": [9]}]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _, reqs = _build(f"--model m --dataset-name=timed_trace --dataset-path {trace} --num-prompts 3 "
                     "--timed-trace-chunk-hash-size 10 --timed-trace-sec-multiplier 0.001", tok)  # fmt: skip
    assert [r.arrival_ns for r in reqs] == [0, 250_000_000, 900_000_000]  # the trace's times, scaled
    bodies = [_wire(r)[2] for r in reqs]
    assert [len(b["prompt"]) for b in bodies] == [20, 12, 8] and all(b["ignore_eos"] for b in bodies)
    assert bodies[0]["prompt"][:10] == bodies[1]["prompt"][:10]  # hash id 1: the same block of tokens
    assert bodies[0]["prompt"][10:] != bodies[1]["prompt"][10:12]
    assert [b["max_tokens"] for b in bodies] == [3, 4, 5]
    _, again = _build(f"--model m --dataset-name timed_trace --dataset-path {trace} --num-prompts 3 "
                      "--timed-trace-chunk-hash-size 10", tok)  # fmt: skip
    assert [r.payload["prompt"] for r in again] == [b["prompt"] for b in bodies]  # the same prompts every run
    _, paced = _build(f"--model m --dataset-name timed_trace --dataset-path {trace} --num-prompts 3 "
                      "--no-self-timed --request-rate 3 --burstiness inf", tok)  # fmt: skip
    assert [r.arrival_ns for r in paced] == [round(1e9 / 3), round(2e9 / 3), 1_000_000_000]  # vLLM's pacing
    with pytest.raises(UserError, match="vllm or openai"):
        _build(f"--backend openai-chat --endpoint /v1/chat/completions --model m --dataset-name timed_trace "
               f"--dataset-path {trace}", tok)  # fmt: skip
    with pytest.raises(UserError, match="only with --dataset-name timed_trace"):
        _build("--model m --self-timed", tok)
    bad = tmp_path / "bad.jsonl"
    for field, value in (("timestamp", "abc"), ("input_length", [3]), ("output_length", "inf")):
        bad.write_text(json.dumps({**rows[0], field: value}) + "\n", encoding="utf-8")
        with pytest.raises(UserError, match=f"row 1: '{field}' is .*(not a number|not a finite number)"):
            _build(f"--model m --dataset-name timed_trace --dataset-path {bad} --num-prompts 1", tok)


def test_prompts_realigned_to_the_servers_tokenizer(tok: Path) -> None:
    """vLLM re-aligns random / prefix_repetition prompts when the server's /tokenize counts otherwise: a prompt the
    server counts longer than drawn is cut to the drawn length through /detokenize. A server here that counts
    four tokens per character (a real HTTP server on a loopback port, stopped at the end)."""
    import http.server
    import threading

    from lmmbench.core.net import free_loopback_port

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize":
                out = {"tokens": [t for c in body["prompt"] for t in (ord(c), 0, 0, 0)]}  # 4 tokens a character
            else:
                out = {"prompt": "".join(chr(t) for t in body["tokens"] if t)}
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    port = free_loopback_port()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        ns = build_parser().parse_args(shlex.split(f"--model m --num-prompts 4 --random-input-len 9 --port {port} "
                                                   f"--tokenizer {tok}"))  # fmt: skip
        cfg = translate(ns)
        reqs = build_bench_requests(ns, cfg["url"])[0]
        drawn = build_bench_requests(ns)[0]
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)
    cut = 0
    for got, plain in zip(reqs, drawn, strict=True):
        n, text = plain.input_tokens or 0, plain.payload["prompt"]
        want = text[: (n + 3) // 4] if 4 * len(text) > n else text  # longer at the server: its first n tokens
        assert got.payload["prompt"] == want
        cut += want != text
    assert cut


def test_without_model_the_servers_first_model_is_sent(tok: Path) -> None:
    _, reqs = _build("--num-prompts 1 --random-input-len 6", tok)
    assert "model" not in reqs[0].payload and _wire(reqs[0])[2]["model"] == "default-model"  # the client's model


def test_speculative_decoding_summary_from_the_servers_counters() -> None:
    """vLLM reads its server's vllm:spec_decode_*_total counters before and after the load; from 2 engines'
    increments of 100 drafts, 300 draft tokens, 180 accepted (positions 90, 60, 30): 60 %, 2.8, 0.9 / 0.6 / 0.3."""
    from lmmbench.loadgen.spec_decode import parse_spec_decode, spec_decode_keys
    from lmmbench.reports.vllm_table import format_result_table

    def page(drafts: int, tokens: int, accepted: int, pos: tuple[int, int, int]) -> str:
        lines = ["# TYPE vllm:spec_decode_num_drafts counter"]
        for eng in ("0", "1"):  # each engine holds half
            lbl = f'model_name="m",engine="{eng}"'
            lines += [f"vllm:spec_decode_num_drafts_total{{{lbl}}} {drafts / 2}",
                      f"vllm:spec_decode_num_draft_tokens_total{{{lbl}}} {tokens / 2}",
                      f"vllm:spec_decode_num_accepted_tokens_total{{{lbl}}} {accepted / 2}",
                      *(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lbl},position="{i}"}} {v / 2}'
                        for i, v in enumerate(pos))]  # fmt: skip
        return "\n".join([*lines, "vllm:num_requests_running 3"])

    before = parse_spec_decode(page(10, 30, 20, (10, 6, 4)))
    after = parse_spec_decode(page(110, 330, 200, (100, 66, 34)))
    stats = spec_decode_keys(before, after)
    assert stats and stats["spec_decode_acceptance_rate"] == pytest.approx(60.0)
    assert stats["spec_decode_acceptance_length"] == pytest.approx(2.8)
    assert (stats["spec_decode_num_drafts"], stats["spec_decode_draft_tokens"]) == (100, 300)
    assert stats["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.9, 0.6, 0.3])
    assert parse_spec_decode("vllm:num_requests_running 1\n") is None  # no speculative decoding: no section
    assert spec_decode_keys(before, before) == {}
    table = format_result_table({"completed": 1, "duration": 1.0, "total_input_tokens": 1, "total_output_tokens": 1,
                                 "request_throughput": 1.0, "output_throughput": 1.0, "total_token_throughput": 2.0,
                                 **stats}, [], [99.0], float("inf"), None, False)  # fmt: skip
    assert "Acceptance rate (%):                     60.00" in table and "  Position 2:" in table


def _templated(tok: Path, tmp: Path) -> Path:
    out = tmp / "templated"
    out.mkdir()
    (out / "tokenizer.json").write_text((tok / "tokenizer.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% for m in messages %}[{{ m.content }}]{% endfor %}"}))  # noqa: E501
    return out


def test_spec_bench_flags(tok: Path, tmp_path: Path) -> None:
    """--spec-bench-category keeps one category's first turns, --spec-bench-output-len (or --output-len over it)
    sets max_tokens; rows shuffled by random.seed(seed), each through the chat template (vLLM's SpecBench)."""
    q = tmp_path / "question.jsonl"
    q.write_text("".join(json.dumps({"category": c, "turns": [f"{c} {i}", "second"]}) + "\n"
                         for i, c in enumerate(["math", "qa", "math", "qa", "math"])))  # fmt: skip
    tmpl = _templated(tok, tmp_path)
    line = f"--model m --dataset-name spec_bench --dataset-path {q} --seed 4 --num-prompts 3"
    _, reqs = _build(f"{line} --spec-bench-category math --spec-bench-output-len 11", tmpl)
    want = ["math 0", "math 2", "math 4"]
    random.Random(4).shuffle(want)  # vLLM: random.seed(seed); random.shuffle(data)
    assert [r.payload["prompt"] for r in reqs] == [f"[{p}]" for p in want]
    assert {r.payload["max_tokens"] for r in reqs} == {11}
    _, plain = _build(f"{line} --disable-shuffle --output-len 6 --spec-bench-output-len 11", tmpl)
    assert [r.payload["prompt"] for r in plain] == ["[math 0]", "[qa 1]", "[math 2]"]
    assert {r.payload["max_tokens"] for r in plain} == {6}
    assert {r.payload["max_tokens"] for r in _build(line, tmpl)[1]} == {256}  # vLLM's default
    with pytest.raises(UserError, match="chat template"):  # vLLM's spec_bench always applies it
        _build(line, tok)
    with pytest.raises(UserError, match="no rows of category code"):
        _build(f"{line} --spec-bench-category code", tmpl)


def test_burstgpt_rows_drawn_as_pandas_samples_them(tok: Path, tmp_path: Path) -> None:
    """vLLM's BurstGPT: GPT-4 rows with a response, picked by DataFrame.sample(n, random_state=seed); each prompt
    the decoded ids (i + j) % vocab_size of the row's request tokens, max_tokens its response tokens."""
    import pandas as pd

    from lmmbench.datasets.vllm.samplers import VllmTokenizer

    csv = tmp_path / "b.csv"
    rows = [(t, "GPT-4" if t % 3 else "ChatGPT", 5 + t, t % 4) for t in range(12)]
    csv.write_text("Timestamp,Model,Request tokens,Response tokens,Log Type\n"
                   + "".join(f"{t},{m},{a},{b},Conversation log\n" for t, m, a, b in rows))  # fmt: skip
    df = pd.read_csv(csv)
    kept = df[(df["Model"] == "GPT-4") & (df["Response tokens"] > 0)]
    vt = VllmTokenizer.load(tok)
    for n in (3, 9):  # fewer than the kept rows, then more (drawn with replacement)
        want = kept.sample(n=n, random_state=7, replace=n > len(kept)).values.tolist()
        _, reqs = _build(f"--model m --dataset-name burstgpt --dataset-path {csv} --seed 7 --num-prompts {n}", tok)
        assert [(r.input_tokens, r.payload["max_tokens"]) for r in reqs] == [(int(w[2]), int(w[3])) for w in want]
        assert reqs[1].payload["prompt"] == vt.decode([(1 + j) % vt.vocab_size for j in range(int(want[1][2]))])
