"""Telemetry during a load test: the test server's /metrics under vLLM, SGLang and TGI names, scraped into
telemetry.jsonl and plotted; GPU telemetry through NVML, here a fake NVML module (no GPU on this machine)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf_testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.loadgen.telemetry import TelemetrySampler, map_server_metrics, parse_prometheus, read_telemetry
from lmmbench.profiling.nvml_sampler import NvmlSampler
from lmmbench.testing import running_testserver
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
    assert map_server_metrics(parse_prometheus(_page(names))) == expected


def test_vllm_prefix_hit_rate_is_the_rate_between_scrapes() -> None:
    before = {"vllm:num_requests_running": 1.0, "vllm:prefix_cache_queries_total": 100.0,
              "vllm:prefix_cache_hits_total": 10.0}  # fmt: skip
    now = {**before, "vllm:prefix_cache_queries_total": 300.0, "vllm:prefix_cache_hits_total": 160.0}
    assert map_server_metrics(now, before)["prefix_cache_hit_rate"] == pytest.approx(0.75)
    assert "prefix_cache_hit_rate" not in map_server_metrics(now)  # no previous scrape: absent, not 0


def test_prometheus_labels_are_summed_and_comments_skipped() -> None:
    text = ('# HELP x\nvllm:num_requests_running{model_name="a",engine="0"} 2\n'
            'vllm:num_requests_running{model_name="b"} 3.0 1700000000\nbad line\n')  # fmt: skip
    assert parse_prometheus(text) == {"vllm:num_requests_running": 5.0}


@pytest.fixture
def url() -> Iterator[str]:
    cfg = TestServerConfig(port=free_loopback_port(), ttft_ms=20, itl_ms=2, prefix_cache=True,
                           prefill_ms_per_token=0.05, metrics_names="sglang", kv_capacity_tokens=4000)  # fmt: skip
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
