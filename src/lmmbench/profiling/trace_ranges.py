"""Profiler traces of one measurement: every Timeline span as a ``torch.profiler.record_function``
range (and an NVTX range on CUDA) named after the breakdown field its time goes to, so the trace
and the breakdown name the same stages (``lmmbench::llm_prefill_ms``, ``lmmbench::others_cache_setup_ms``...).

``profile_capture(path, use_cuda)`` profiles the code in its block and writes a Chrome / Perfetto
JSON trace to ``path``; while it is open, every ``Timeline`` opens its spans as ranges too
(``current_ranges``). Outside a capture nothing is emitted and a Timeline costs what it did.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lmmbench.profiling.categories import field_of_category

__all__ = ["RANGE_PREFIX", "TraceRanges", "current_ranges", "profile_capture", "range_name"]

RANGE_PREFIX = "lmmbench::"

_ACTIVE: contextvars.ContextVar[TraceRanges | None] = contextvars.ContextVar("lmmbench_trace_ranges", default=None)


def range_name(category: str) -> str:
    """The trace range of a span category: the breakdown field its exclusive time is added to."""
    return RANGE_PREFIX + field_of_category(category)


class TraceRanges:
    """A stack of open record_function (and NVTX) ranges."""

    def __init__(self, use_cuda: bool = False) -> None:
        import torch

        self._record_function = torch.autograd.profiler.record_function
        self._nvtx = torch.cuda.nvtx if use_cuda and torch.cuda.is_available() else None
        self._open: list[Any] = []

    def push(self, category: str) -> None:
        """Open the range of a span of ``category``."""
        name = range_name(category)
        rf = self._record_function(name)
        rf.__enter__()
        self._open.append(rf)
        if self._nvtx is not None:
            self._nvtx.range_push(name)

    def pop(self) -> None:
        """Close the innermost range."""
        if self._open:
            self._open.pop().__exit__(None, None, None)
            if self._nvtx is not None:
                self._nvtx.range_pop()


def current_ranges() -> TraceRanges | None:
    """The ranges of the capture in progress (None outside ``profile_capture``)."""
    return _ACTIVE.get()


@contextmanager
def profile_capture(path: Path, use_cuda: bool = False) -> Iterator[None]:
    """Profile the block (CPU, and CUDA when ``use_cuda``) and write its Chrome trace to ``path``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if use_cuda and torch.cuda.is_available() else [])
    ranges = TraceRanges(use_cuda)
    token = _ACTIVE.set(ranges)
    try:
        with profile(activities=activities, record_shapes=True) as prof:
            yield
    finally:
        _ACTIVE.reset(token)
        while ranges._open:
            ranges.pop()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
