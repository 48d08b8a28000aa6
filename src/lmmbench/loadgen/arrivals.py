"""Arrival processes as seeded sequences of absolute target offsets (nanoseconds from t0).

Targets are computed up front from cumulative inter-arrival gaps, never as relative sleeps, so
a late send does not push later ones back (no drift).
"""

from __future__ import annotations

import math
import random

__all__ = ["arrival_offsets_ns"]


def arrival_offsets_ns(
    kind: str,
    rate: float,
    *,
    count: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    burstiness: float = 1.0,
) -> list[int]:
    """Target offsets of ``count`` arrivals (or all within ``duration_s``) at ``rate`` per second.

    ``constant``: evenly spaced; ``poisson``: exponential gaps; ``gamma``: gamma gaps with shape
    ``burstiness`` (1 is Poisson, below 1 burstier) and the same mean. The first arrival is at 0.
    """
    if rate <= 0:
        raise ValueError("rate must be positive")
    if count is None and duration_s is None:
        raise ValueError("give count or duration_s")
    if math.isinf(rate):  # --rate inf: every request at t0 (bounded by the concurrency cap, if any)
        if count is None:
            raise ValueError("an infinite rate needs a request count")
        return [0] * count
    rng = random.Random(seed)
    mean = 1.0 / rate
    out: list[int] = []
    t = 0.0
    limit_ns = int(duration_s * 1e9) if duration_s is not None else None
    while True:
        if count is not None and len(out) >= count:
            break
        t_ns = round(t * 1e9)
        if limit_ns is not None and t_ns >= limit_ns:
            break
        out.append(t_ns)
        if kind == "constant":
            t = len(out) * mean
        elif kind == "poisson":
            t += rng.expovariate(rate)
        elif kind == "gamma":
            t += rng.gammavariate(burstiness, mean / burstiness)
        else:
            raise ValueError(f"unknown arrival process '{kind}'")
    return out
