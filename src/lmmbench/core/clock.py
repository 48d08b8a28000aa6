"""The one clock for durations: ``time.perf_counter_ns``. Wall-clock time is a label only."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

__all__ = ["TimedCallable", "now_ns", "ns_to_ms", "wall_label"]

now_ns = time.perf_counter_ns


def ns_to_ms(duration_ns: int | float) -> float:
    """Nanoseconds to milliseconds."""
    return float(duration_ns) / 1e6


def wall_label() -> str:
    """An ISO-8601 UTC timestamp, for labelling runs (never for measuring)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class TimedCallable:
    """Transparent proxy around a callable (e.g. a processor's feature extractor): every attribute is
    delegated to ``inner``; ``elapsed_ns`` adds up the time spent in calls to it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.elapsed_ns = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t0 = now_ns()
        try:
            return self._inner(*args, **kwargs)
        finally:
            self.elapsed_ns += now_ns() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
