"""Telemetry during a load test: the server's Prometheus ``/metrics`` and the local GPUs (NVML), sampled
at an interval on a background thread and appended to ``telemetry.jsonl`` in the run folder.

The names of vLLM, SGLang and TGI are mapped onto common quantities (``loadgen.server_metrics``): requests
running and waiting, KV-cache usage (fraction 0..1, averaged over engines and kept per engine), prefix-cache
hit rate, preemptions / retractions, prompt, cached and generated tokens per second, speculative-decoding
acceptance. A quantity the server does not export is absent from the row. A server that answers
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

from lmmbench.loadgen.server_metrics import SERVER_METRICS, Scrape, map_server_metrics, parse_prometheus
from lmmbench.profiling.nvml_sampler import NvmlSampler

__all__ = ["SERVER_METRICS", "TELEMETRY_NAME", "TelemetrySampler", "map_server_metrics", "parse_prometheus"]

TELEMETRY_NAME = "telemetry.jsonl"


def _metrics_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    return (url[:-3] if url.endswith("/v1") else url) + "/metrics"


class TelemetrySampler:
    """Samples server metrics and GPUs every ``interval_s`` into ``<run_dir>/telemetry.jsonl``."""

    def __init__(self, base_url: str, run_dir: Path, interval_s: float = 1.0, nvml: NvmlSampler | None = None) -> None:
        from lmmbench.core.secrets import url_credentials

        url, basic = url_credentials(base_url)  # user:password@ is credentials, never part of the host name
        self.url = _metrics_url(url)
        self._request = urllib.request.Request(self.url, headers={"Authorization": basic} if basic else {})
        self.path = run_dir / TELEMETRY_NAME
        self.interval_s = interval_s
        self.nvml = nvml if nvml is not None else NvmlSampler()
        self.point: int | None = None  # the load point in progress, copied into each row
        self.server_ok: bool | None = None  # None: not tried yet
        self.notes: list[str] = []
        self.rows = 0
        self.data_rows = 0  # rows with anything from the server or a GPU
        self._previous: Scrape | None = None
        self._previous_ns = 0
        self.deprecated_names: list[str] = []  # deprecated metric names read as fallbacks (the run log lists them)
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
            with urllib.request.urlopen(self._request, timeout=max(self.interval_s, 1.0)) as resp:
                values = parse_prometheus(resp.read().decode("utf-8", "replace"))
                now_ns = time.perf_counter_ns()
        except urllib.error.HTTPError as exc:  # the server answered: it has no /metrics
            if self.server_ok is None:
                self.server_ok = False
                self.notes.append(f"server telemetry off: {self.url} answered {exc.code}")
            return {}
        except (OSError, ValueError) as exc:  # not up (yet: --server-cmd): tried again next time
            if not self.notes:
                self.notes.append(f"server telemetry: {self.url} did not answer ({exc})")
            return {}
        dt_s = (now_ns - self._previous_ns) / 1e9 if self._previous is not None else None
        row, deprecated = map_server_metrics(values, self._previous, dt_s)
        self._previous, self._previous_ns = values, now_ns
        for name in deprecated:
            if name not in self.deprecated_names:
                self.deprecated_names.append(name)
                self.notes.append(f"server telemetry: read the deprecated metric {name}; the server exports no "
                                  "current name for it")
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
