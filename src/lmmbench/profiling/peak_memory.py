"""Peak memory of one call, on CUDA (the allocator's peak) or on CPU (the process's peak resident set).

CUDA: ``torch.cuda.reset_peak_memory_stats`` before, ``max_memory_allocated`` after; what counts
is every live tensor (weights, inputs, activations, cache), as on the card. An out-of-memory
error is caught and reported (``oom=True``); the caller's references are gone when ``measure``
returns, and the cache is emptied, so the next call starts clean.

CPU (Linux): tracemalloc does not see torch's allocations, and the allocator keeps freed pages, so
the peak resident set (``VmHWM``) is reset by writing ``5`` to ``/proc/self/clear_refs`` and
glibc's free pages are handed back (``malloc_trim(0)``) before the call; the peak is
``VmHWM`` after it. The probe reports the growth over the resident set just before the call, so
what was built before the call (inputs) is not counted: callers add it explicitly. Where
``clear_refs`` cannot be written, a 1 ms sampler thread of ``VmRSS`` gives a lower bound.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["CpuPeakMemory", "CudaPeakMemory", "MemoryMeasurement", "available_mb", "is_oom_error",
           "peak_memory_probe", "release_cpu_memory", "resident_mb"]

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_MEMINFO = Path("/proc/meminfo")


@dataclass
class MemoryMeasurement:
    """One call's memory: the peak over the call and the level just before it (MB), and whether it ran
    out of memory (the call's result is None then)."""

    peak_mb: float
    base_mb: float
    oom: bool
    reason: str
    result: Any = None
    method: str = ""

    @property
    def growth_mb(self) -> float:
        return max(0.0, self.peak_mb - self.base_mb)


def is_oom_error(exc: BaseException) -> bool:
    """An out-of-memory error of torch (CUDA or CPU allocator) or Python."""
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    if name == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError / torch.OutOfMemoryError
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _status_kb(field: str) -> float:
    match = re.search(rf"^{field}:\s+(\d+)\s+kB", _STATUS.read_text(), re.MULTILINE)
    if match is None:
        raise UserError(f"{_STATUS} has no {field}: CPU memory peaks need Linux /proc; run on CUDA instead")
    return float(match.group(1))


def resident_mb() -> float:
    """This process's resident set now (MB)."""
    return _status_kb("VmRSS") / 1024.0


def available_mb() -> float:
    """``MemAvailable`` of the machine (MB; inf when unknown)."""
    try:
        match = re.search(r"^MemAvailable:\s+(\d+)\s+kB", _MEMINFO.read_text(), re.MULTILINE)
    except OSError:
        return float("inf")
    return float(match.group(1)) / 1024.0 if match else float("inf")


def release_cpu_memory() -> None:
    """Collect garbage and hand glibc's free heap pages back to the OS (no-op elsewhere)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _call_catching_cpu_oom(fn: Callable[[], Any]) -> tuple[Any, bool, str]:
    """``(result, oom, reason)`` of ``fn()``; an out-of-memory error is caught, any other raised."""
    try:
        return fn(), False, ""
    except Exception as exc:
        if not is_oom_error(exc):
            raise
        return None, True, f"cpu_oom: {type(exc).__name__}"


class CpuPeakMemory:
    """Peak resident-set growth of a call (Linux)."""

    def __init__(self) -> None:
        self.method = "vmhwm_reset" if self._can_reset() else "rss_sampler_1ms"

    @staticmethod
    def _can_reset() -> bool:
        try:
            _CLEAR_REFS.write_text("5")
            _status_kb("VmHWM")
        except (OSError, UserError):
            return False
        return True

    def measure(self, fn: Callable[[], Any]) -> MemoryMeasurement:
        release_cpu_memory()
        base = resident_mb()
        if self.method == "vmhwm_reset":
            _CLEAR_REFS.write_text("5")
            result, oom, reason = _call_catching_cpu_oom(fn)
            peak = _status_kb("VmHWM") / 1024.0
        else:
            peak_box = [base]
            stop = threading.Event()

            def sample() -> None:
                while not stop.wait(0.001):
                    peak_box[0] = max(peak_box[0], resident_mb())

            thread = threading.Thread(target=sample, daemon=True)
            thread.start()
            try:
                result, oom, reason = _call_catching_cpu_oom(fn)
            finally:
                stop.set()
                thread.join()
            peak = max(peak_box[0], resident_mb())
        release_cpu_memory()
        return MemoryMeasurement(peak, base, oom, reason, result, self.method)


class CudaPeakMemory:
    """Peak allocated CUDA memory of a call; out-of-memory is caught and recovered from."""

    method = "cuda_max_memory_allocated"

    def __init__(self, device: Any) -> None:
        self.device = device

    def _clean(self) -> None:
        import torch

        gc.collect()
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()

    def measure(self, fn: Callable[[], Any]) -> MemoryMeasurement:
        import torch

        self._clean()
        torch.cuda.reset_peak_memory_stats(self.device)
        base = torch.cuda.memory_allocated(self.device) / 2**20
        result: Any = None
        oom, reason = False, ""
        try:
            result = fn()
            torch.cuda.synchronize(self.device)
        except Exception as exc:
            if not is_oom_error(exc):
                raise
            oom, reason = True, f"cuda_oom: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
        # leaving the except block dropped the traceback (and the frames holding the failed tensors)
        peak = torch.cuda.max_memory_allocated(self.device) / 2**20
        self._clean()
        return MemoryMeasurement(peak, base, oom, reason, result, self.method)


def peak_memory_probe(device: Any) -> CpuPeakMemory | CudaPeakMemory:
    """The probe for ``device`` (a torch device or its type string)."""
    if getattr(device, "type", str(device)) == "cuda":
        return CudaPeakMemory(device)
    return CpuPeakMemory()
