"""Telemetry during a load test: the test server's /metrics under vLLM, SGLang and TGI names, scraped into
telemetry.jsonl and plotted; GPU telemetry through NVML, here a fake NVML module (no GPU on this machine)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.loadgen.server_metrics import SERVER_METRICS, CounterRatio
from lmmbench.loadgen.telemetry import TelemetrySampler, map_server_metrics, parse_prometheus, read_telemetry
from lmmbench.profiling.nvml_sampler import NvmlSampler
from lmmbench.testing import running_testserver
from lmmbench.testing.sampler_tokenizer import build_sampler_tokenizer
from lmmbench.testing.server_model import PrefixCacheModel, render_metrics


def _page(names: str, running: int = 3, waiting: int = 2) -> str:
    cfg = TestServerConfig(metrics_names=names, prefix_cache=True, kv_capacity_tokens=1000)  # type: ignore[arg-type]
    cache = PrefixCacheModel(cfg)
    cache.lookup_and_fill(["w"] * 32)
    cache.lookup_and_fill(["w"] * 32)  # 32 of 64 prompt tokens were cached
    cache.active_tokens = 250
    return render_metrics(cfg, cache, running, waiting).decode()


@pytest.mark.parametrize(("names", "expected"), [
    ("vllm", {"server": "vllm", "running": 3, "waiting": 2, "kv_cache_usage": 0.25}),
    ("sglang", {"server": "sglang", "running": 3, "waiting": 2, "kv_cache_usage": 0.25, "prefix_cache_hit_rate": 0.5}),
    ("tgi", {"server": "tgi", "running": 3, "waiting": 2}),
])  # fmt: skip
def test_each_servers_metric_names_map_to_the_same_quantities(names: str, expected: dict[str, Any]) -> None:
    row, deprecated = map_server_metrics(parse_prometheus(_page(names)))
    assert {k: row[k] for k in expected} == expected and deprecated == []


def _scrape(lines: list[str]) -> dict[str, dict[str, float]]:
    return parse_prometheus("\n".join(lines) + "\n")


def test_vllm_prefix_hit_rate_is_the_rate_between_scrapes() -> None:
    before = _scrape(["vllm:num_requests_running 1", "vllm:prefix_cache_queries_total 100",
                      "vllm:prefix_cache_hits_total 10"])  # fmt: skip
    now = _scrape(["vllm:num_requests_running 1", "vllm:prefix_cache_queries_total 300",
                   "vllm:prefix_cache_hits_total 160"])  # fmt: skip
    assert map_server_metrics(now, before, 1.0)[0]["prefix_cache_hit_rate"] == pytest.approx(0.75)
    assert "prefix_cache_hit_rate" not in map_server_metrics(now)[0]  # no previous scrape: absent, not 0


def test_prometheus_label_sets_are_kept_apart_and_comments_skipped() -> None:
    text = ('# HELP x\nvllm:num_requests_running{model_name="a",engine="0"} 2\n'
            'vllm:num_requests_running{model_name="b"} 3.0 1700000000\nbad line\n')  # fmt: skip
    assert parse_prometheus(text) == {
        "vllm:num_requests_running": {'engine="0",model_name="a"': 2.0, 'model_name="b"': 3.0}
    }


def test_fractions_of_two_engines_are_averaged_never_summed() -> None:
    """Two vLLM engines at 60 % KV use read as 60 % (was 120 %), SGLang with data parallel 2 at a 40 % hit
    rate reads as 40 % (was 80 %); unequal engines are kept per engine beside the mean."""
    vllm = _scrape(['vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.6',
                    'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6',
                    'vllm:num_requests_running{engine="0",model_name="m"} 3',
                    'vllm:num_requests_running{engine="1",model_name="m"} 4'])  # fmt: skip
    row, _ = map_server_metrics(vllm)
    assert row["kv_cache_usage"] == pytest.approx(0.6) and row["running"] == 7  # counts do add up
    assert row["per_engine"]["kv_cache_usage"] == {"engine=0": 0.6, "engine=1": 0.6}
    sgl = _scrape(['sglang:cache_hit_rate{dp_rank="0"} 0.4', 'sglang:cache_hit_rate{dp_rank="1"} 0.4',
                   'sglang:token_usage{dp_rank="0"} 0.2', 'sglang:token_usage{dp_rank="1"} 0.8'])  # fmt: skip
    row, _ = map_server_metrics(sgl)
    assert row["server"] == "sglang" and row["prefix_cache_hit_rate"] == pytest.approx(0.4)
    assert row["kv_cache_usage"] == pytest.approx(0.5)
    assert row["per_engine"]["kv_cache_usage"] == {"dp_rank=0": 0.2, "dp_rank=1": 0.8}


def test_counters_become_rates_and_spec_decode_acceptance() -> None:
    """Counters of two engines: per-second rates of their summed increments; speculative decoding's
    acceptance rate = accepted / draft tokens and length = 1 + accepted / drafts over the interval, as
    vLLM's own bench computes them from the same counters."""
    def page(drafts: int, draft_toks: int, accepted: int, preempt: int, cached: int) -> dict[str, dict[str, float]]:
        return _scrape([f'vllm:spec_decode_num_drafts_total{{engine="{e}"}} {drafts}' for e in "01"]
                       + [f'vllm:spec_decode_num_draft_tokens_total{{engine="{e}"}} {draft_toks}' for e in "01"]
                       + [f'vllm:spec_decode_num_accepted_tokens_total{{engine="{e}"}} {accepted}' for e in "01"]
                       + [f'vllm:num_preemptions_total{{engine="{e}"}} {preempt}' for e in "01"]
                       + [f'vllm:prompt_tokens_cached_total{{engine="{e}"}} {cached}' for e in "01"])  # fmt: skip
    before, now = page(10, 40, 20, 1, 100), page(30, 120, 60, 4, 600)
    row, _ = map_server_metrics(now, before, 2.0)
    assert row["spec_decode_acceptance_rate"] == pytest.approx(80 / 160)
    assert row["spec_decode_acceptance_length"] == pytest.approx(1 + 80 / 40)
    assert row["preemptions_per_s"] == pytest.approx(6 / 2.0)
    assert row["prompt_tokens_cached_per_s"] == pytest.approx(1000 / 2.0)
    assert "preemptions_per_s" not in map_server_metrics(now)[0]  # a rate needs two scrapes: absent, not 0


def test_deprecated_names_only_as_named_fallbacks() -> None:
    old = _scrape(["vllm:num_requests_running 1", "vllm:gpu_cache_usage_perc 0.3"])
    row, deprecated = map_server_metrics(old)
    assert row["kv_cache_usage"] == pytest.approx(0.3)
    assert deprecated == ["vllm:gpu_cache_usage_perc (for kv_cache_usage)"]
    both = _scrape(["vllm:kv_cache_usage_perc 0.5", "vllm:gpu_cache_usage_perc 0.3",
                    "vllm:prefix_cache_queries_total 10", "vllm:prefix_cache_hits_total 5",
                    "vllm:gpu_prefix_cache_hit_rate 0.9"])  # fmt: skip
    row, deprecated = map_server_metrics(both)
    assert row["kv_cache_usage"] == pytest.approx(0.5) and deprecated == []
    assert "prefix_cache_hit_rate" not in row  # the current counters need a second scrape; the old gauge is not read


def test_current_metric_names_are_the_pinned_engines_own() -> None:
    """Every current name telemetry reads is exported by vLLM 0.33.0 or SGLang 0.5.23 (names read from their
    sources into engine_metric_names.json), and so is every vLLM / SGLang name the test server serves."""
    known = json.loads((Path(__file__).parent / "engine_metric_names.json").read_text())
    exported = {**known["vllm==0.33.0"], **known["sglang==0.5.23"]}
    for family in ("vllm", "sglang"):
        for q in SERVER_METRICS[family]:
            names = (*q.numerator, *q.denominator) if isinstance(q, CounterRatio) else q.names
            assert all(n in exported for n in names), (family, q)
            assert isinstance(q, CounterRatio) or all(n not in exported for n in q.deprecated), q
    served = parse_prometheus(_page("all"))
    assert {n for n in served if not n.startswith("tgi")} <= set(exported)
    kinds = {n: exported[n] for n in served if n in exported}
    assert all(kind == "counter" for n, kind in kinds.items() if n.endswith("_total"))


@pytest.fixture
def url() -> Iterator[str]:
    cfg = TestServerConfig(port=free_loopback_port(), ttft_ms=20, itl_ms=2, prefix_cache=True,
                           prefill_ms_per_token=0.05, metrics_names="sglang", kv_capacity_tokens=4000,
                           metrics_engines=2)  # fmt: skip
    with running_testserver(cfg) as u:
        yield u


def test_perf_scrapes_server_metrics_into_telemetry_and_plots_them(url: str, tmp_path: Path) -> None:
    argv = ["perf", "--url", url, "--model", "test-model", "--dataset", "shared_prefix", "--prefix-groups", "2",
            "--prefix-tokens", "64", "--suffix-tokens", "8", "--num-requests", "40", "--concurrency", "4",
            "--output-tokens", "40", "--telemetry-interval-s", "0.05", "--out-dir", str(tmp_path), "--run-name", "t",
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    run = tmp_path / "perf" / "t"
    rows = read_telemetry(run / "telemetry.jsonl")
    assert len(rows) >= 5 and all(r["server"] == "sglang" and r["point"] in (None, 0) for r in rows)
    assert max(r["running"] for r in rows) == 4  # the client's concurrency, as the server saw it
    assert all(0 <= r["kv_cache_usage"] <= 4 * (72 + 40) / 4000 + 1e-9 for r in rows)
    assert max(r["kv_cache_usage"] for r in rows) > 0
    # 2 groups x 64 prefix words: of 40 x 72 prompt words, 38 x 64 were cached by the end (the pre-flight
    # probes' few uncached words count too, hence the 1 % tolerance)
    assert rows[-1]["prefix_cache_hit_rate"] == pytest.approx(38 * 64 / (40 * 72), rel=0.01)
    assert rows[-1]["prefix_cache_hit_rate"] <= 38 * 64 / (40 * 72)
    # two data-parallel engines: counts add up, fractions are their mean (never above 1), kept per engine
    assert all(set(r["per_engine"]["kv_cache_usage"]) == {"dp_rank=0", "dp_rank=1"} for r in rows)
    assert all(r["kv_cache_usage"] == pytest.approx(sum(r["per_engine"]["kv_cache_usage"].values()) / 2) for r in rows)
    assert all(r["kv_capacity_tokens"] == 4000 for r in rows)
    assert max(r.get("prompt_tokens_per_s", 0.0) for r in rows) > 0  # a counter read as a rate
    assert json.loads((run / "run.json").read_text())["measurement"].get("telemetry_deprecated_metrics") is None
    assert (run / "telemetry.png").stat().st_size > 1000
    assert "telemetry.png" in (run / "report.html").read_text()


class FakeNvml:
    """A fake NVML module (pynvml's functions), named as such: no GPU here."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self) -> None:
        self.shutdown = 0

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shutdown += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"Fake H100"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=50 + h, memory=20)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=2 * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1:
            raise RuntimeError("NVMLError_NotSupported")
        return 350_000

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h: int, kind: int) -> int:
        return 61


def test_nvml_sampler_reads_every_gpu_fake_nvml() -> None:
    fake = FakeNvml()
    s = NvmlSampler(fake)
    g0, g1 = s.sample()
    assert g0 == {"index": 0, "name": "Fake H100", "util_gpu_pct": 50.0, "util_mem_pct": 20.0, "mem_used_mib": 2048.0,
                  "mem_total_mib": 81920.0, "power_w": 350.0, "sm_clock_mhz": 1980, "mem_clock_mhz": 2619,
                  "temperature_c": 61}  # fmt: skip
    assert g1["util_gpu_pct"] == 51.0 and g1["power_w"] is None  # unsupported: absent, never a stand-in
    s.close()
    s.close()
    assert fake.shutdown == 1


def test_nvml_absent_here_says_why() -> None:
    s = NvmlSampler()  # no pynvml / driver on this machine
    assert not s.available and s.sample() == [] and ("pynvml" in s.reason or "NVML" in s.reason)


def test_telemetry_rows_carry_gpus_and_no_server_fake_nvml(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_loopback_port()}"
    sampler = TelemetrySampler(dead, tmp_path, interval_s=0.02, nvml=NvmlSampler(FakeNvml())).start()
    time.sleep(0.15)
    path = sampler.stop()
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(rows) >= 3 and all(len(r["gpus"]) == 2 and "running" not in r for r in rows)
    assert sampler.notes and "did not answer" in sampler.notes[0]
    from lmmbench.reports.telemetry_plot import plot_telemetry

    png = plot_telemetry(tmp_path, rows, [])
    assert png is not None and png.stat().st_size > 1000


def test_a_server_without_metrics_is_asked_once_fake_nvml(tmp_path: Path) -> None:
    import http.server
    import threading

    asked: list[str] = []

    class NoMetrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_error(404)

        def log_message(self, *args: Any) -> None: ...

    server = http.server.HTTPServer(("127.0.0.1", 0), NoMetrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        sampler = TelemetrySampler(url, tmp_path, interval_s=0.02, nvml=NvmlSampler(FakeNvml())).start()
        time.sleep(0.12)
        sampler.stop()
    finally:
        server.shutdown()
        server.server_close()
    assert asked == ["/metrics"] and "answered 404" in sampler.notes[0]  # /v1 dropped from the URL
    assert sampler.rows >= 3 and sampler.data_rows == sampler.rows  # the GPUs are still sampled


def test_vllm_result_file_has_spec_decode_keys_when_the_server_has_them(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Two engines drafting 3 tokens a step, each accepted with probability 0.5 (the test server's model: every
    step emits its accepted tokens plus one): vLLM's keys from the counters' increments over the point, acceptance
    50 % and length 1 + 3 x 0.5 = 2.5 (within the per-engine rounding of whole drafts); a server without them
    gives no keys, as vLLM; the printed table has vLLM's "Speculative Decoding" section with the file's values
    (and none without the counters)."""
    argv = ["bench", "serve", "--model", "test-model", "--num-prompts", "40", "--random-input-len", "8",
            "--random-output-len", "25", "--ignore-eos", "--save-result", "--result-dir", str(tmp_path),
            "--tokenizer", str(build_sampler_tokenizer(tmp_path / "tok"))]  # fmt: skip
    printed: dict[int, str] = {}
    for spec in (3, 0):
        cfg = TestServerConfig(port=free_loopback_port(), ttft_ms=1, itl_ms=0.2, metrics_names="vllm",
                               metrics_engines=2, spec_draft_tokens=spec, spec_acceptance=0.5)  # fmt: skip
        with running_testserver(cfg) as u:
            capsys.readouterr()
            assert main([*argv, "--base-url", u, "--result-filename", f"spec{spec}.json"]) == 0
            printed[spec] = capsys.readouterr().out
    res = json.loads((tmp_path / "spec3.json").read_text())
    section = printed[3].split("-Speculative Decoding-", 1)[1].split("\n=====", 1)[0]
    rows = dict(re.findall(r"^(\S[^:\n]*:|  Position \d+:) +(\S+) *$", section, flags=re.M))
    assert float(rows["Acceptance rate (%):"]) == pytest.approx(res["spec_decode_acceptance_rate"], abs=0.005)
    assert float(rows["Acceptance length:"]) == pytest.approx(res["spec_decode_acceptance_length"], abs=0.005)
    assert int(rows["Drafts:"]) == res["spec_decode_num_drafts"]
    assert int(rows["Draft tokens:"]) == res["spec_decode_draft_tokens"]
    assert int(rows["Accepted tokens:"]) == res["spec_decode_accepted_tokens"]
    assert [float(rows[f"  Position {i}:"]) for i in range(3)] == pytest.approx([50.0] * 3, abs=1.0)
    assert "Speculative Decoding" not in printed[0] and "Serving Benchmark Result" in printed[0]
    assert res["spec_decode_acceptance_rate"] == pytest.approx(50.0, abs=1.0)
    assert res["spec_decode_acceptance_length"] == pytest.approx(2.5, abs=0.02)
    assert res["spec_decode_num_drafts"] == pytest.approx(40 * 25 / 2.5, abs=4)  # 1000 tokens, 2.5 per step
    assert res["spec_decode_draft_tokens"] == 3 * res["spec_decode_num_drafts"]
    assert res["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.5] * 3, abs=0.01)
    assert not [k for k in json.loads((tmp_path / "spec0.json").read_text()) if k.startswith("spec_decode")]


def test_deprecated_names_read_as_fallbacks_are_named_in_the_run_log(tmp_path: Path) -> None:
    """A server with only vLLM's pre-V1 names: KV usage read from vllm:gpu_cache_usage_perc, and the run log
    names every deprecated metric that was read."""
    cfg = TestServerConfig(port=free_loopback_port(), ttft_ms=5, itl_ms=1, metrics_names="vllm-legacy",
                           kv_capacity_tokens=2000)  # fmt: skip
    with running_testserver(cfg) as u:
        assert main(["perf", "--url", u, "--model", "test-model", "--num-requests", "30", "--concurrency", "3",
                     "--output-tokens", "20", "--telemetry-interval-s", "0.05", "--out-dir", str(tmp_path),
                     "--run-name", "old", "--no-progress", "--no-plots"]) == 0  # fmt: skip
    run = tmp_path / "perf" / "old"
    rows = read_telemetry(run / "telemetry.jsonl")
    assert max(r["kv_cache_usage"] for r in rows) > 0
    named = json.loads((run / "run.json").read_text())["measurement"]["telemetry_deprecated_metrics"]
    assert named == ["vllm:gpu_cache_usage_perc (for kv_cache_usage)",
                     "vllm:gpu_prefix_cache_hit_rate (for prefix_cache_hit_rate)"]  # fmt: skip
