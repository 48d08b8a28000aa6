"""Multi-turn, shared-prefix and trace-replay workloads end to end against the test server's prefix cache.

Ground truth: the test server's TTFT is ttft_ms + (prompt words not in its prefix cache) x prefill_ms_per_token,
with 16-word cache blocks; the expected cached prefix of each request is worked out here from what it sent.
A TTFT is never below its expected value (less 0.5 ms of timer rounding); a busy machine only adds time, so
"the cache helped" is checked as: the median excess stays below half of what the cache saves.
"""

from __future__ import annotations

import itertools
import json
import statistics
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver

PER_TOKEN_MS = 1.0
BASE_TTFT_MS = 2.0


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    cfg = TestServerConfig(port=free_loopback_port(), ttft_ms=BASE_TTFT_MS, itl_ms=0.5, prefix_cache=True,
                           prefill_ms_per_token=PER_TOKEN_MS, prefix_block_tokens=16)  # fmt: skip
    with running_testserver(cfg) as u:
        yield u


@pytest.fixture
def url(server: str) -> str:
    """The server with an empty prefix cache (POST /reset_prefix_cache, as on vLLM)."""
    req = urllib.request.Request(server + "/reset_prefix_cache", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200
    return server


def _perf(url: str, out: Path, *args: str) -> list[dict[str, Any]]:
    argv = ["perf", "--url", url, "--model", "test-model", "--out-dir", str(out), "--run-name", "r", "--no-plots",
            "--no-progress", "--keep-text", *args]  # fmt: skip
    assert main(argv) == 0
    lines = (out / "perf" / "r" / "records.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines]
    assert all(r["ok"] for r in recs)
    return recs


def _ttft_send(r: dict[str, Any]) -> float:
    return float(r["ttft_send_ms"])


def test_synthetic_multiturn_sends_history_after_think_time_and_hits_the_cache(url: str, tmp_path: Path) -> None:
    recs = _perf(url, tmp_path, "--dataset", "multiturn", "--turns", "3", "--think-time-ms", "40",
                 "--num-requests", "9", "--concurrency", "2", "--input-tokens", "32", "--output-tokens", "4")
    convs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        convs[r["labels"]["conversation"]].append(r)
    assert len(convs) == 3 and all(len(c) == 3 for c in convs.values())
    for conv in convs.values():
        conv.sort(key=lambda r: r["labels"]["turn"])
        # each turn carries the history: 32 user words per turn + 4 assistant words per earlier turn
        assert [r["input_tokens"] for r in conv] == [32, 68, 104]
        assert [r["prompt_tokens"] for r in conv] == [32, 68, 104]  # what the server counted
        for prev, nxt in itertools.pairwise(conv):
            assert nxt["scheduled_ns"] - prev["end_ns"] == 40_000_000  # the next turn is due 40 ms after the reply
            gap_ms = (nxt["sent_ns"] - prev["end_ns"]) / 1e6
            assert 40.0 <= gap_ms < 300, gap_ms  # and is sent then, never before
    # turn 0: nothing cached; turn 1: the 32 words of turn 0 (2 blocks); turn 2: 64 of turn 1's 68
    full = [BASE_TTFT_MS + PER_TOKEN_MS * n for n in (32, 68, 104)]
    expected = [BASE_TTFT_MS + PER_TOKEN_MS * n for n in (32, 68 - 32, 104 - 64)]
    for k in range(3):
        ttfts = [_ttft_send(c[k]) for c in convs.values()]
        assert min(ttfts) >= expected[k] - 0.5, (k, ttfts, expected[k])
        if k:
            assert statistics.median(ttfts) - expected[k] < (full[k] - expected[k]) / 2, (k, ttfts, expected[k])


def test_sharegpt_multiturn_replays_whole_conversations(url: str, tmp_path: Path) -> None:
    convs = [[("how are you today", "fine thanks"), ("and the weather", "sunny and warm all day"), ("ok", "bye")],
             [("tell me a story", "once upon a time")]]  # fmt: skip
    rows = [{"conversations": [m for u, a in c for m in ({"from": "human", "value": u}, {"from": "gpt", "value": a})]}
            for c in convs]  # fmt: skip
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(rows))
    recs = _perf(url, tmp_path, "--dataset", "multiturn", "--dataset-path", str(path), "--num-requests", "4",
                 "--output-tokens", "0")  # fmt: skip
    by_len = sorted((r["labels"]["turn"], r["input_tokens"], r["output_tokens"]) for r in recs)
    # turn k sends every earlier user and recorded assistant turn; max_tokens is the recorded reply's length
    assert by_len == [(0, 4, 2), (0, 4, 4), (1, 9, 5), (2, 15, 1)]


def test_shared_prefix_groups_pay_prefill_once_per_group(url: str, tmp_path: Path) -> None:
    recs = _perf(url, tmp_path, "--dataset", "shared_prefix", "--prefix-groups", "2", "--prefix-tokens", "64",
                 "--suffix-tokens", "8", "--num-requests", "10", "--concurrency", "1", "--output-tokens", "2")
    groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(recs, key=lambda r: r["sent_ns"]):
        groups[r["labels"]["prefix_group"]].append(r)
    assert sorted(len(g) for g in groups.values()) == [5, 5]
    for g in groups.values():
        assert all(r["input_tokens"] == 72 for r in g)
        first, rest = _ttft_send(g[0]), [_ttft_send(r) for r in g[1:]]
        full = BASE_TTFT_MS + PER_TOKEN_MS * 72
        assert first >= full - 0.5  # the whole prompt prefilled
        cached = BASE_TTFT_MS + PER_TOKEN_MS * 8  # the 64-word prefix is 4 cached blocks
        assert min(rest) >= cached - 0.5 and statistics.median(rest) - cached < (full - cached) / 2, rest


def test_mooncake_trace_keeps_arrival_times_lengths_and_shared_blocks(url: str, tmp_path: Path) -> None:
    lines = [
        {"timestamp": 1000, "input_length": 32, "output_length": 3, "hash_ids": [1, 2]},
        {"timestamp": 1100, "input_length": 48, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 1200, "input_length": 16, "output_length": 2, "hash_ids": [4]},
        {"timestamp": 1400, "input_length": 40, "output_length": 4, "hash_ids": [1, 2, 5]},
    ]
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    recs = _perf(url, tmp_path, "--dataset", "trace", "--dataset-path", str(path), "--trace-block-tokens", "16",
                 "--trace-time-scale", "0.5", "--num-requests", "4")  # fmt: skip
    recs.sort(key=lambda r: r["scheduled_ns"])
    t0 = recs[0]["scheduled_ns"]
    assert [round((r["scheduled_ns"] - t0) / 1e6) for r in recs] == [0, 50, 100, 200]  # halved by the scale
    assert all((r["sent_ns"] - r["scheduled_ns"]) / 1e6 < 20 for r in recs)
    assert [(r["input_tokens"], r["output_tokens"]) for r in recs] == [(32, 3), (48, 5), (16, 2), (40, 4)]
    # hash ids 1, 2 are shared: requests 2 and 4 find their first 32 tokens cached
    uncached = [32, 16, 16, 8]
    for r, n, length in zip(recs, uncached, (32, 48, 16, 40), strict=True):
        want, full = BASE_TTFT_MS + PER_TOKEN_MS * n, BASE_TTFT_MS + PER_TOKEN_MS * length
        assert want - 0.5 <= _ttft_send(r), (n, _ttft_send(r))
        if n < length:
            assert _ttft_send(r) - want < (full - want) / 2, (n, _ttft_send(r))


def test_azure_trace_csv(url: str, tmp_path: Path) -> None:
    path = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,20,3\n"
                    "2023-11-16 18:15:46.7805900,12,2\n2023-11-16 18:15:46.9305900,30,4\n")  # fmt: skip
    recs = _perf(url, tmp_path, "--dataset", "trace", "--dataset-path", str(path))
    recs.sort(key=lambda r: r["scheduled_ns"])
    t0 = recs[0]["scheduled_ns"]
    assert [round((r["scheduled_ns"] - t0) / 1e6) for r in recs] == [0, 100, 250]
    assert [(r["input_tokens"], r["output_tokens"]) for r in recs] == [(20, 3), (12, 2), (30, 4)]


def test_bad_trace_line_is_one_clear_error(url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5}\n')
    assert main(["perf", "--url", url, "--dataset", "trace", "--dataset-path", str(path),
                 "--out-dir", str(tmp_path)]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "t.jsonl:1" in err and "output_length" in err and "Traceback" not in err


def test_mooncake_blocks_with_a_tokenizer_are_cut_to_input_length(tmp_path: Path) -> None:
    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.datasets.perf.catalog import build_requests
    from lmmbench.datasets.perf.registry import load_tokenizer
    from lmmbench.testing import build_word_tokenizer

    tok = load_tokenizer(build_word_tokenizer(tmp_path / "tok"))
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 20, "output_length": 3, "hash_ids": [7, 8]}\n'
                    '{"timestamp": 5, "input_length": 30, "output_length": 3, "hash_ids": [7, 8]}\n')  # fmt: skip
    cfg = PerfConfig(dataset="trace", dataset_path=path, trace_block_tokens=16, endpoint="completions")
    a, b = build_requests(cfg, 10, tok)
    assert (a.input_tokens, b.input_tokens) == (20, 30) and (a.arrival_ns, b.arrival_ns) == (0, 5_000_000)
    assert len(tok.encode(a.payload["prompt"], add_special_tokens=False).ids) == 20
    assert b.payload["prompt"].startswith(a.payload["prompt"])  # the same hash ids, the same leading text


def test_multiturn_open_loop_schedules_first_turns_and_chains_the_rest(url: str, tmp_path: Path) -> None:
    recs = _perf(url, tmp_path, "--dataset", "multiturn", "--turns", "2", "--think-time-ms", "20", "--rate", "20",
                 "--arrival", "constant", "--num-requests", "6", "--input-tokens", "8", "--output-tokens", "3",
                 "--workers", "2")  # fmt: skip
    first = sorted(r["scheduled_ns"] for r in recs if r["labels"]["turn"] == 0)
    assert [round((t - first[0]) / 1e6) for t in first] == [0, 50, 100]  # 20/s, constant: first turns only
    ends = {r["labels"]["conversation"]: r["end_ns"] for r in recs if r["labels"]["turn"] == 0}
    for r in recs:
        if r["labels"]["turn"] == 1:
            assert r["sent_ns"] - ends[r["labels"]["conversation"]] >= 20_000_000
    assert sorted({r["worker"] for r in recs}) == [0, 1]  # conversations spread over both client processes
    workers = defaultdict(set)
    for r in recs:
        workers[r["labels"]["conversation"]].add(r["worker"])
    assert all(len(w) == 1 for w in workers.values())  # a conversation stays with its process
