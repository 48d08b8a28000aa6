"""Peak GPU memory per request for the measuring proxy, read through NVML (``pynvml``) when it is there.

The proxy does not run the engine, so it cannot read the engine's allocator: it reads what NVML reports as
used on every GPU the machine's driver shows (all processes, summed over GPUs) when a request arrives, every
``interval_ms`` while requests are in flight (one sampling thread for all of them), and when it ends. A
request's ``device_peak_memory_bytes`` is the largest of those readings: the whole device's memory, every process
on it — not the engine process's own, which lmmbench's server reports as ``process_peak_memory_bytes``. Without
pynvml or a driver every request's peak is None (unmeasured), never 0.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

__all__ = ["GpuMemoryPeaks"]


class GpuMemoryPeaks:
    """Per-request peaks of the GPUs' used memory; ``nvml`` is the module to use (default: ``pynvml``)."""

    def __init__(self, nvml: Any | None = None, interval_ms: float = 10.0) -> None:
        from lmmbench.profiling.nvml_sampler import NvmlSampler

        self._sampler = NvmlSampler(nvml)
        self.available = self._sampler.available
        self.reason = self._sampler.reason
        self.interval_s = interval_ms / 1e3
        self._lock = threading.Lock()
        self._peaks: dict[int, int] = {}
        self._ids = itertools.count()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None

    def used_bytes(self) -> int | None:
        """Memory used now, summed over every GPU (None when NVML cannot say)."""
        total = 0
        try:
            for h in self._sampler.handles:
                total += int(self._sampler.nvml.nvmlDeviceGetMemoryInfo(h).used)
        except Exception:  # an NVMLError: this reading is lost, not replaced by a number
            return None
        return total

    def _note(self, value: int | None, keys: list[int]) -> None:
        if value is None:
            return
        for k in keys:
            if k in self._peaks and value > self._peaks[k]:
                self._peaks[k] = value

    def begin(self) -> int | None:
        """Start a request's peak (first reading now); its key, or None without NVML."""
        if not self.available:
            return None
        value = self.used_bytes()
        with self._lock:
            key = next(self._ids)
            self._peaks[key] = value if value is not None else -1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lmmbench-proxy-nvml", daemon=True)
                self._thread.start()
        self._wake.set()
        return key

    def end(self, key: int | None) -> int | None:
        """The request's peak, including a last reading now (None without NVML or without any reading)."""
        if key is None:
            return None
        value = self.used_bytes()
        with self._lock:
            self._note(value, [key])
            peak = self._peaks.pop(key, -1)
        return peak if peak >= 0 else None

    def _run(self) -> None:
        while not self._stop:
            with self._lock:
                active = list(self._peaks)
            if not active:
                self._wake.wait()
                self._wake.clear()
                continue
            value = self.used_bytes()
            with self._lock:
                self._note(value, active)
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def close(self) -> None:
        """Stop the sampling thread and shut NVML down."""
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(1)
        self._sampler.close()
