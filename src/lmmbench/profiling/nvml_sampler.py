"""Local GPU telemetry through NVML (``pynvml``, from the ``nvidia-ml-py`` package) when present.

``NvmlSampler().sample()`` returns one dict per GPU: utilisation (GPU and memory, %), memory used
and total (MiB), power (W), SM and memory clocks (MHz), temperature (C). A reading NVML cannot
give (a field the device or driver does not support) is None, never a stand-in. Without pynvml
or a driver, ``available`` is False and ``reason`` says why; ``sample()`` then returns [].
Used by perf telemetry (lmmbench.loadgen.telemetry) and by anyone who watches a GPU while it works.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["GPU_FIELDS", "NvmlSampler"]

#: The fields of one GPU sample (besides ``index`` and ``name``).
GPU_FIELDS = (
    "util_gpu_pct", "util_mem_pct", "mem_used_mib", "mem_total_mib", "power_w", "sm_clock_mhz",
    "mem_clock_mhz", "temperature_c",
)  # fmt: skip


def _read(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:  # an NVMLError for a field this GPU or driver does not report
        return None


class NvmlSampler:
    """Samples every local GPU through NVML; ``nvml`` is the module to use (default: ``pynvml``)."""

    def __init__(self, nvml: Any | None = None) -> None:
        self.available = False
        self.reason = ""
        self.nvml: Any = nvml
        self.handles: list[Any] = []
        if self.nvml is None:
            try:
                self.nvml = importlib.import_module("pynvml")
            except ImportError:
                self.reason = "pynvml is not installed (pip install 'lmmbench[gpu]')"
                return
        try:
            self.nvml.nvmlInit()
            self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.nvml.nvmlDeviceGetCount())]
        except Exception as exc:  # no driver, no GPU: NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            self.reason = f"NVML unavailable: {exc}"
            return
        self.available = bool(self.handles)
        if not self.available:
            self.reason = "NVML sees no GPU"

    def sample(self) -> list[dict[str, Any]]:
        """One reading of every GPU (empty without NVML)."""
        if not self.available:
            return []
        return [self._one(i, h) for i, h in enumerate(self.handles)]

    def _one(self, index: int, h: Any) -> dict[str, Any]:
        n = self.nvml
        util = _read(lambda: n.nvmlDeviceGetUtilizationRates(h))
        mem = _read(lambda: n.nvmlDeviceGetMemoryInfo(h))
        power_mw = _read(lambda: n.nvmlDeviceGetPowerUsage(h))
        name = _read(lambda: n.nvmlDeviceGetName(h))
        return {
            "index": index,
            "name": name.decode() if isinstance(name, bytes) else name,
            "util_gpu_pct": None if util is None else float(util.gpu),
            "util_mem_pct": None if util is None else float(util.memory),
            "mem_used_mib": None if mem is None else mem.used / 2**20,
            "mem_total_mib": None if mem is None else mem.total / 2**20,
            "power_w": None if power_mw is None else power_mw / 1e3,
            "sm_clock_mhz": _read(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            "mem_clock_mhz": _read(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            "temperature_c": _read(lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
        }

    def close(self) -> None:
        """Shut NVML down (once)."""
        if self.available:
            _read(self.nvml.nvmlShutdown)
            self.available = False
