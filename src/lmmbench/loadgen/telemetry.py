"""Telemetry during a load test: the server's Prometheus ``/metrics`` and the local GPUs (NVML), sampled
at an interval on a background thread and appended to ``telemetry.jsonl`` in the run folder.

The names of vLLM, SGLang and TGI are mapped onto four quantities: requests running and waiting,
KV-cache usage (fraction 0..1) and prefix-cache hit rate (fraction of prompt tokens found cached;
from vLLM's hit/query counters it is the rate over the last interval). A quantity the server does
not export is absent from the row (TGI exports no KV usage or prefix hits). A server that answers
``/metrics`` with an error is not asked again; one that does not answer (not up yet, ``--server-cmd``)
is asked at every interval. The GPU part needs pynvml and a driver.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, TextIO

from lmmbench.profiling.nvml_sampler import NvmlSampler

__all__ = ["SERVER_METRICS", "TELEMETRY_NAME", "TelemetrySampler", "map_server_metrics", "parse_prometheus"]

TELEMETRY_NAME = "telemetry.jsonl"

#: Per server family: our quantity -> the gauge it exports (first found wins).
SERVER_METRICS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "prefix_cache_hit_rate": ("vllm:gpu_prefix_cache_hit_rate",),
    },
    "sglang": {
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_cache_usage": ("sglang:token_usage",),
        "prefix_cache_hit_rate": ("sglang:cache_hit_rate",),
    },
    "tgi": {"running": ("tgi_batch_current_size",), "waiting": ("tgi_queue_size",)},
}
_VLLM_HIT_COUNTERS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")


def parse_prometheus(text: str) -> dict[str, float]:
    """Metric name -> value of a Prometheus text page, summed over label sets (e.g. per model)."""
    out: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            rest = rest.rsplit("}", 1)[-1]
        else:
            name, _, rest = line.partition(" ")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        out[name.strip()] = out.get(name.strip(), 0.0) + value
    return out


def map_server_metrics(values: dict[str, float], previous: dict[str, float] | None = None) -> dict[str, Any]:
    """Our quantities from one scrape (``previous``: the last scrape, for vLLM's hit-rate counters)."""
    for family, names in SERVER_METRICS.items():
        found = {q: next((values[n] for n in cands if n in values), None) for q, cands in names.items()}
        row: dict[str, Any] = {k: v for k, v in found.items() if v is not None}
        if not row:
            continue
        row["server"] = family
        hits, queries = _VLLM_HIT_COUNTERS
        if family == "vllm" and hits in values and queries in values and previous is not None:
            dq = values[queries] - previous.get(queries, 0.0)
            if dq > 0:
                row["prefix_cache_hit_rate"] = (values[hits] - previous.get(hits, 0.0)) / dq
        return row
    return {}


def _metrics_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    return (url[:-3] if url.endswith("/v1") else url) + "/metrics"


class TelemetrySampler:
    """Samples server metrics and GPUs every ``interval_s`` into ``<run_dir>/telemetry.jsonl``."""

    def __init__(self, base_url: str, run_dir: Path, interval_s: float = 1.0, nvml: NvmlSampler | None = None) -> None:
        self.url = _metrics_url(base_url)
        self.path = run_dir / TELEMETRY_NAME
        self.interval_s = interval_s
        self.nvml = nvml if nvml is not None else NvmlSampler()
        self.point: int | None = None  # the load point in progress, copied into each row
        self.server_ok: bool | None = None  # None: not tried yet
        self.notes: list[str] = []
        self.rows = 0
        self.data_rows = 0  # rows with anything from the server or a GPU
        self._previous: dict[str, float] | None = None
        self._stop = threading.Event()
        self._file: TextIO = self.path.open("a", encoding="utf-8")
        self._thread = threading.Thread(target=self._loop, name="lmmbench-telemetry", daemon=True)

    def start(self) -> TelemetrySampler:
        """Take a first sample now and then one every interval."""
        self._thread.start()
        return self

    def _scrape(self) -> dict[str, Any]:
        if self.server_ok is False:
            return {}
        try:
            with urllib.request.urlopen(self.url, timeout=max(self.interval_s, 1.0)) as resp:
                values = parse_prometheus(resp.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as exc:  # the server answered: it has no /metrics
            if self.server_ok is None:
                self.server_ok = False
                self.notes.append(f"server telemetry off: {self.url} answered {exc.code}")
            return {}
        except (OSError, ValueError) as exc:  # not up (yet: --server-cmd): tried again next time
            if not self.notes:
                self.notes.append(f"server telemetry: {self.url} did not answer ({exc})")
            return {}
        row = map_server_metrics(values, self._previous)
        self._previous = values
        if self.server_ok is None:
            self.server_ok = bool(row)
            if not row:
                self.notes.append(f"server telemetry off: {self.url} has no vLLM, SGLang or TGI metric names")
        return row

    def sample(self) -> dict[str, Any]:
        """One row: perf_counter_ns instant, the point, the server's quantities, the GPUs."""
        row: dict[str, Any] = {"t_ns": time.perf_counter_ns(), "point": self.point}
        row.update(self._scrape())
        gpus = self.nvml.sample()
        if gpus:
            row["gpus"] = gpus
        return row

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self._write(self.sample())
            self._file.flush()
            next_t += self.interval_s
            self._stop.wait(max(next_t - time.monotonic(), 0.0))

    def stop(self) -> Path:
        """Take a last sample, stop the thread, close the file; returns its path."""
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 5)
        self._write(self.sample())
        self._file.close()
        self.nvml.close()
        return self.path

    def _write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row) + "\n")
        self.rows += 1
        self.data_rows += bool(row.get("server") or row.get("gpus"))


def read_telemetry(path: Path) -> list[dict[str, Any]]:
    """The rows of a telemetry.jsonl ([] when there is none)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
