"""`lmmbench bench sglang` carries SGLang's request and run flags as sglang 0.5.23's `bench_serving` acts on them
(`sglang/benchmark/serving.py`): headers and routing keys, non-streamed requests, LoRA adapters drawn by SGLang's
distributions, the cache flush between warm-up and load, the cache report, the fake-prefill bootstrap fields, and
the profiler calls with their options (to the PD workers with --pd-separated). Each test runs a command line
against `lmmbench testserver` and reads what the server received (`GET /received`: every POST's path, query,
headers and body, in order) and what bench sglang printed and wrote. The non-streamed timings are checked against
the server's injected TTFT / ITL (timing: this module runs serially)."""

from __future__ import annotations

import collections
import csv
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver
from lmmbench.testing.fixtures import server_received

TTFT_MS, ITL_MS, BLOCK = 20.0, 2.0, 4
GSP = ["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "2", "--gsp-prompts-per-group", "3",
       "--gsp-system-prompt-len", "16", "--gsp-question-len", "4", "--gsp-output-len", "2"]  # fmt: skip
RANDOM = ["--dataset-name", "random", "--random-input", "8", "--random-output", "8", "--random-range-ratio", "1"]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    """A server that accepts LoRA adapter names as models and caches prompt prefixes in blocks of BLOCK words."""
    port = free_loopback_port()
    cfg = TestServerConfig(port=port, ttft_ms=TTFT_MS, itl_ms=ITL_MS, accept_any_model=True, prefix_cache=True,
                           prefix_block_tokens=BLOCK)  # fmt: skip
    with running_testserver(cfg) as url:
        yield url, port


def _run(port: int, out: Path, *args: str) -> dict[str, Any]:
    """One bench sglang command line (exit 0); the JSON line it appended to ``out``."""
    assert main(["bench", "sglang", "--port", str(port), "--output-file", str(out), *args]) == 0
    return json.loads(out.read_text().splitlines()[-1])  # type: ignore[no-any-return]


def _sent(url: str, before: int, path: str, n: int) -> list[dict[str, Any]]:
    """The last ``n`` POSTs to ``path`` since ``before`` (the load; lmmbench's pre-flight probe comes first)."""
    got = [e for e in server_received(url)[before:] if e["path"] == path]
    assert len(got) >= n
    return got[-n:]


def test_headers_routing_keys_and_fake_prefill_fields(server: tuple[str, int], tmp_path: Path) -> None:
    """--header KEY=VALUE as SGLang parses it (split at the first '='; an entry without a value, which SGLang
    drops silently, is refused by name before the server is asked), the shared-prefix group's routing key in
    X-SMG-Routing-Key, and --fake-prefill's bootstrap fields, which win over the extra body as in SGLang."""
    url, port = server
    before = len(server_received(url))
    for bad in ("X-Empty=", "plain"):
        assert main(["bench", "sglang", "--port", str(port), *GSP, "--header", bad]) == 2
    assert len(server_received(url)) == before
    _run(port, tmp_path / "o.jsonl", "--backend", "sglang-oai", *GSP, "--warmup-requests", "0", "--header",
         "X-Team=a b", "X-Eq=k=v", "--gsp-send-routing-key", "--fake-prefill",
         "--extra-request-body", '{"bootstrap_room": 9, "foo": 1}')  # fmt: skip
    sent = _sent(url, before, "/v1/completions", 6)
    for e in sent:
        assert e["headers"]["x-team"] == "a b" and e["headers"]["x-eq"] == "k=v"
        assert (e["body"]["bootstrap_host"], e["body"]["bootstrap_room"], e["body"]["foo"]) == ("2.2.2.2", 0, 1)
    keys = [e["headers"]["x-smg-routing-key"] for e in sent]
    assert all(re.fullmatch(r"[0-9a-f]{8}_\d{14}_[01]", k) for k in keys)
    assert sorted(collections.Counter(keys).values()) == [3, 3]  # one key per group of 3 prompts
    assert len({k.rsplit("_", 1)[0] for k in keys}) == 1  # one run prefix
    before = len(server_received(url))
    _run(port, tmp_path / "o.jsonl", *RANDOM, "--num-prompts", "2", "--gsp-send-routing-key")
    assert all("x-smg-routing-key" not in e["headers"] for e in _sent(url, before, "/generate", 2))  # gsp only


@pytest.mark.parametrize("backend,path", [("sglang", "/generate"), ("sglang-oai", "/v1/completions"),
                                          ("sglang-oai-chat", "/v1/chat/completions")])  # fmt: skip
def test_disable_stream_sends_whole_requests_and_ttft_is_e2e(
    server: tuple[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, path: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A whole response shows its first token when it ends: TTFT = E2E latency (as SGLang), here the server's
    TTFT + 7 x ITL for 8 tokens; no TPOT or ITL is measured (SGLang writes TPOT 0), in SGLang's keys and in
    lmmbench's own records."""
    url, port = server
    monkeypatch.chdir(tmp_path)
    before = len(server_received(url))
    res = _run(port, tmp_path / "o.jsonl", "--backend", backend, *RANDOM, "--num-prompts", "6", "--disable-stream",
               "--output-details")  # fmt: skip
    assert all(e["body"]["stream"] is False and "stream_options" not in e["body"] for e in _sent(url, before, path, 6))
    assert res["completed"] == 6 and res["total_output_tokens"] == 6 * 8 and res["itls"] == [[]] * 6
    whole_ms = TTFT_MS + 7 * ITL_MS
    assert whole_ms <= res["mean_ttft_ms"] < whole_ms + 15  # the injected truth, loose for a busy box
    assert res["mean_ttft_ms"] == res["mean_e2e_latency_ms"] and res["p99_ttft_ms"] == res["p99_e2e_latency_ms"]
    assert res["mean_tpot_ms"] is None and res["mean_itl_ms"] is None
    assert re.search(r"^Mean TPOT \(ms\):\s+n/a", capsys.readouterr().out, flags=re.M)
    [records] = list(tmp_path.glob("lmmbench-results/perf/*/records.csv"))
    rows = [r for r in csv.DictReader(records.open()) if r["warmup"] == "False"]
    assert len(rows) == 6 and all(r["tpot_ms"] == "" and r["ttft_ms"] == r["e2e_ms"] for r in rows)


def test_lora_names_drawn_as_sglang_draws_them(server: tuple[str, int], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """distinct: in turn; uniform: Python's random seeded with --seed, one choice per request (SGLang's
    random.seed(seed) + random.choice); skewed: Zipf weights alpha^-i. The OpenAI backends ask for the adapter as
    the model and lora_path; the native API as lora_path only."""
    url, port = server
    out, names = tmp_path / "o.jsonl", ["a", "b", "c"]
    base = [*RANDOM, "--warmup-requests", "0", "--lora-name", *names]
    before = len(server_received(url))
    _run(port, out, "--backend", "sglang-oai", *base, "--num-prompts", "7", "--lora-request-distribution", "distinct")
    sent = _sent(url, before, "/v1/completions", 7)
    assert [e["body"]["model"] for e in sent] == [e["body"]["lora_path"] for e in sent] == list("abcabca")
    before = len(server_received(url))
    _run(port, out, *base, "--num-prompts", "40", "--seed", "11")
    rng = random.Random(11)
    sent = _sent(url, before, "/generate", 40)
    assert [e["body"]["lora_path"] for e in sent] == [rng.choice(names) for _ in range(40)]
    assert not any("model" in e["body"] for e in sent)
    before = len(server_received(url))
    _run(port, out, *base, "--num-prompts", "400", "--lora-request-distribution", "skewed", "--lora-zipf-alpha", "2")
    counts = collections.Counter(e["body"]["lora_path"] for e in _sent(url, before, "/generate", 400))
    for name, share in zip(names, (4 / 7, 2 / 7, 1 / 7), strict=True):  # 2^0 : 2^-1 : 2^-2
        assert abs(counts[name] / 400 - share) < 0.07  # 3 standard deviations of a share of 400 draws
    for bad, says in ((["--lora-name", "a", "--lora-request-distribution", "skewed"], "more than one adapter"),
                      (["--lora-zipf-alpha", "1"], "greater than 1")):  # fmt: skip
        assert main(["bench", "sglang", "--port", str(port), *bad]) == 2
        assert says in capsys.readouterr().err


def test_flush_cache_between_warmup_and_load_and_the_cache_report(
    server: tuple[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two groups of three prompts sharing a 16-word prefix, one at a time. With --flush-cache the warm-up (2 copies of
    the first request, at most 32 output tokens, the first adapter) fills the cache, the flush empties it, and the
    load's first request of each group misses: 4 x 16 cached words. Without it, every prompt of the run before is
    still cached whole (the same seed draws the same prompts): 6 x 20. SGLang's OpenAI API reports them in sglext
    (device tier), its native API in meta_info."""
    url, port = server
    out = tmp_path / "o.jsonl"
    args = [*GSP[:-1], "40", "--max-concurrency", "1", "--warmup-requests", "2", "--cache-report"]
    before = len(server_received(url))
    res = _run(port, out, *args, "--flush-cache", "--lora-name", "x", "y")
    log = server_received(url)[before:]
    flush = next(i for i, e in enumerate(log) if e["path"] == "/flush_cache")
    assert log[flush]["query"] == "timeout=60.0"  # SGLang's default --flush-cache-timeout
    warm = [e for e in log[:flush] if e["path"] == "/generate"][-2:]
    assert len(warm) == 2 and all(e["body"]["sampling_params"]["max_new_tokens"] == 32 for e in warm)
    assert [e["body"]["lora_path"] for e in warm] == ["x", "x"]  # SGLang warms up with the first adapter
    load = [e for e in log[flush:] if e["path"] == "/generate"][-6:]
    assert all(e["body"]["sampling_params"]["max_new_tokens"] == 40 for e in load)
    prompt_words = 6 * (16 + 4)
    assert res["cache_report"] == {"total_prompt_tokens": prompt_words, "total_cached_tokens": 4 * 16,
                                   "cache_hit_rate_pct": round(4 * 16 / prompt_words * 100, 2),
                                   "device_cached_tokens": None, "host_cached_tokens": None,
                                   "storage_cached_tokens": None, "storage_backend": None}  # fmt: skip
    assert re.search(r"^Cache hit rate:\s+53\.3%$", capsys.readouterr().out, flags=re.M)
    res = _run(port, out, *args, "--backend", "sglang-oai", "--output-details")
    assert res["cache_report"]["total_cached_tokens"] == res["cache_report"]["device_cached_tokens"] == prompt_words
    assert res["cached_tokens"] == [20] * 6 and res["cached_tokens_details"] == [{"device": 20, "host": 0}] * 6
    for extra, target in ((["--flush-cache", "--flush-cache-timeout", "5"], "/flush_cache?timeout=5.0"),
                          (["--flush-cache", "--backend", "vllm"], "/reset_prefix_cache?"),
                          (["--backend", "sglang-oai"], "/flush_cache?timeout=60.0")):  # the last: in SGLang's CI
        monkeypatch.setenv("SGLANG_IS_IN_CI", "true" if "--flush-cache" not in extra else "false")
        before = len(server_received(url))
        _run(port, out, *RANDOM, "--num-prompts", "1", *extra)
        assert [f"{e['path']}?{e['query']}" for e in server_received(url)[before:] if "cache" in e["path"]] == [target]


def test_profile_options_reach_the_profiler(server: tuple[str, int], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """SGLang's /start_profile body: the activities, steps, stages, prefix and a fresh trace folder under
    --profile-output-dir (else $SGLANG_TORCH_PROFILER_DIR), created on the client; --profile-start-step and
    --profile-steps as strings in both calls; no /stop_profile when the server stops itself."""
    url, port = server
    out = tmp_path / "o.jsonl"

    def calls(*args: str) -> list[tuple[str, Any]]:
        before = len(server_received(url))
        _run(port, out, *RANDOM, "--num-prompts", "2", "--profile", *args)
        return [(e["path"], e["body"]) for e in server_received(url)[before:] if "profile" in e["path"]]

    (start, body), stop = calls("--profile-activities", "CPU", "MEM", "--profile-by-stage", "--profile-stages",
                                "prefill", "decode", "--profile-output-dir", str(tmp_path / "prof"),
                                "--profile-prefix", "run1", "--profile-start-step", "3")  # fmt: skip
    folder = Path(body.pop("output_dir"))
    assert start == "/start_profile" and body == {"activities": ["CPU", "MEM"], "num_steps": 5,
                                                  "profile_by_stage": True, "profile_stages": ["prefill", "decode"],
                                                  "profile_prefix": "run1", "start_step": "3"}  # fmt: skip
    assert folder.parent == tmp_path / "prof" and folder.is_dir() and float(folder.name) > 0
    assert stop == ("/stop_profile", {"start_step": "3"})
    [(_, body)] = calls("--profile-steps", "7")
    assert body["num_steps"] == "7" and body["activities"] == ["CPU", "GPU"]  # SGLang's default activities
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path / "env"))
    [(_, body)] = calls("--profile-num-steps", "4")
    assert body["num_steps"] == 4 and Path(body["output_dir"]).parent == tmp_path / "env"


def test_pd_separated_profiles_each_worker(server: tuple[str, int], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """--pd-separated: the profiler calls go to every --profile-decode-url worker (here one worker named twice),
    not to the benchmarked server; with no worker URL SGLang warns and profiles nothing."""
    url, port = server
    worker_port = free_loopback_port()
    with running_testserver(TestServerConfig(port=worker_port, ttft_ms=1, itl_ms=0.2)) as worker:
        before = len(server_received(url))
        _run(port, tmp_path / "o.jsonl", *RANDOM, "--num-prompts", "2", "--profile", "--pd-separated",
             "--profile-decode-url", worker, worker)  # fmt: skip
        assert [e["path"] for e in server_received(worker)] == ["/start_profile"] * 2 + ["/stop_profile"] * 2
        assert not any("profile" in e["path"] for e in server_received(url)[before:])
        _run(port, tmp_path / "o.jsonl", *RANDOM, "--num-prompts", "2", "--profile", "--pd-separated")
        assert len(server_received(worker)) == 4 and "PD separated mode requires" in capsys.readouterr().err
        assert not any("profile" in e["path"] for e in server_received(url)[before:])
