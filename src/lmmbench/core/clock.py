"""The one clock for durations: ``time.perf_counter_ns``. Wall-clock time is a label only."""

from __future__ import annotations

import time
from datetime import datetime, timezone

__all__ = ["now_ns", "ns_to_ms", "wall_label"]

now_ns = time.perf_counter_ns


def ns_to_ms(duration_ns: int | float) -> float:
    """Nanoseconds to milliseconds."""
    return float(duration_ns) / 1e6


def wall_label() -> str:
    """An ISO-8601 UTC timestamp, for labelling runs (never for measuring)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
