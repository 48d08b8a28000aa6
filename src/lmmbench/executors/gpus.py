"""GPU discovery (nvidia-ml-py, else torch, else none) and a GPU utilisation / memory sampler.

The sampler reads NVML every ``interval_s`` while a run works and gives mean / max utilisation
and the peak memory used; without NVML there are no samples and the fields stay absent.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["GpuInfo", "GpuSampler", "check_gpu_requests", "discover_gpus", "load_nvml"]


@dataclass(frozen=True)
class GpuInfo:
    """One GPU: its index, name, total memory in MiB (None when unknown) and who found it."""

    index: int
    name: str
    memory_mib: float | None
    source: str


def load_nvml() -> Any | None:
    """The initialised ``pynvml`` module (nvidia-ml-py), or None when it or the driver is missing."""
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


_GPU_DEVICE_FILES = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")  # NVIDIA, ROCm, WSL


def discover_gpus(nvml: Any | None = None) -> list[GpuInfo]:
    """The GPUs of this machine: NVML first, then torch; an empty list means CPU only."""
    nvml = nvml if nvml is not None else load_nvml()
    if nvml is not None:
        out = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            name = nvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            out.append(GpuInfo(i, name, nvml.nvmlDeviceGetMemoryInfo(h).total / 2**20, "nvml"))
        return out
    if "torch" not in sys.modules and not any(Path(p).exists() for p in _GPU_DEVICE_FILES):
        return []  # no GPU driver here: importing torch only to learn that costs seconds (and its exit as much)
    try:
        import torch

        if torch.cuda.is_available():
            return [GpuInfo(i, torch.cuda.get_device_name(i),
                            torch.cuda.get_device_properties(i).total_memory / 2**20, "torch")
                    for i in range(torch.cuda.device_count())]  # fmt: skip
    except ImportError:
        pass
    return []


def check_gpu_requests(requests: list[tuple[str, float]], have: int, where: str) -> None:
    """Refuse (``UserError``, before anything runs) the first row whose ``num_gpus`` exceeds the ``have`` GPUs of
    ``where`` (this machine, the Ray cluster): such a row would otherwise run on the CPU without a word.
    ``requests``: (row name, num_gpus)."""
    from lmmbench.core.errors import UserError

    for name, want in requests:
        if want > have:
            raise UserError(f"row '{name}': num_gpus: {want:g} but {where} has {have} GPU(s); lower num_gpus (0: "
                            f"the CPU) or run the row where the GPUs are")


@dataclass
class GpuSampler:
    """Samples one GPU through NVML on a thread between ``start()`` and ``stop()``."""

    nvml: Any
    index: int
    interval_s: float = 0.5
    util_pct: list[float] = field(default_factory=list)
    mem_used_mib: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _sample(self) -> None:
        handle = self.nvml.nvmlDeviceGetHandleByIndex(self.index)
        while True:
            t0 = time.perf_counter_ns()
            try:
                self.util_pct.append(float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
                self.mem_used_mib.append(self.nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20)
            except Exception:  # a failed read is a missing sample, never a made-up one
                pass
            wait = self.interval_s - (time.perf_counter_ns() - t0) / 1e9
            if self._stop.wait(max(wait, 0.0)):
                return

    def start(self) -> GpuSampler:
        """Start sampling (the first sample is taken at once)."""
        self._thread = threading.Thread(target=self._sample, name=f"gpu-sampler-{self.index}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        """Stop and return ``gpu_util_pct_mean/max``, ``gpu_mem_used_mib_max`` (empty without samples)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        out: dict[str, float] = {}
        if self.util_pct:
            out["gpu_util_pct_mean"] = sum(self.util_pct) / len(self.util_pct)
            out["gpu_util_pct_max"] = max(self.util_pct)
        if self.mem_used_mib:
            out["gpu_mem_used_mib_max"] = max(self.mem_used_mib)
        if out:
            out["gpu_samples"] = float(len(self.util_pct))
        return out
