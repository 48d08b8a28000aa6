"""Throughputs as a series of time windows, so that a run-level rate gets a bootstrap interval.

A load point's measured span (first scheduled send to last completion, the span its summary divides by)
is cut into equal windows; each window's value is what completed in it (requests, output tokens, requests
that met the SLOs) over the window's length. The windows' mean is exactly the point's throughput, and a
moving-block bootstrap over the windows in time order (``metrics.compare``) gives its interval: a run whose
rate drifted or stalled for a while gets a wider one. Pure functions of numbers taken from records.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["WINDOW_REQUESTS", "window_count", "window_rates"]

WINDOW_REQUESTS = 10  # about this many completions per window
_MIN_WINDOWS, _MAX_WINDOWS = 5, 50


def window_count(completions: int) -> int:
    """How many windows a point with ``completions`` finished requests is cut into (5 to 50)."""
    return max(_MIN_WINDOWS, min(_MAX_WINDOWS, completions // WINDOW_REQUESTS))


def window_rates(start_ns: int, end_ns: int, events: Sequence[tuple[int, float]], windows: int) -> list[float]:
    """Per window, the sum of the weights of ``events`` ``(end_ns, weight)`` completing in it, per second.

    The windows partition ``[start_ns, end_ns]``; an event at ``end_ns`` falls in the last one. Their mean
    is ``sum(weights) / span``.
    """
    span_ns = max(end_ns - start_ns, 1)
    totals = [0.0] * windows
    for t_ns, weight in events:
        index = min(max((t_ns - start_ns) * windows // span_ns, 0), windows - 1)
        totals[int(index)] += weight
    window_s = span_ns / windows / 1e9
    return [t / window_s for t in totals]
