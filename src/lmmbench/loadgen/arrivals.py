"""Arrival processes as seeded sequences of absolute target offsets (nanoseconds from t0).

Targets are computed up front from cumulative inter-arrival gaps, never as relative sleeps, so
a late send does not push later ones back (no drift). Processes live in the ``ARRIVALS`` registry
(entry-point group ``lmmbench.arrivals``): each maps (rng, rate, burstiness, index of the arrival
just placed, its time) to the next arrival time in seconds.
"""

from __future__ import annotations

import math
import random
from typing import Protocol

from lmmbench.core.registry import Registry

__all__ = ["ARRIVALS", "ArrivalProcess", "arrival_offsets_ns"]


class ArrivalProcess(Protocol):
    """The next arrival time (seconds) after arrival ``index`` placed at ``t_s``."""

    def __call__(self, rng: random.Random, rate: float, burstiness: float, index: int, t_s: float) -> float: ...


ARRIVALS: Registry[ArrivalProcess] = Registry("arrivals")


@ARRIVALS.register("constant")
def _constant(rng: random.Random, rate: float, burstiness: float, index: int, t_s: float) -> float:
    """Evenly spaced (from the index, so rounding never accumulates)."""
    return (index + 1) / rate


@ARRIVALS.register("poisson")
def _poisson(rng: random.Random, rate: float, burstiness: float, index: int, t_s: float) -> float:
    """Exponential gaps."""
    return t_s + rng.expovariate(rate)


@ARRIVALS.register("gamma")
def _gamma(rng: random.Random, rate: float, burstiness: float, index: int, t_s: float) -> float:
    """Gamma gaps of shape ``burstiness`` (1 is Poisson, below 1 burstier) and mean 1 / rate."""
    return t_s + rng.gammavariate(burstiness, 1.0 / rate / burstiness)


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

    ``kind`` names a process in ``ARRIVALS`` (``constant``, ``poisson``, ``gamma``, or a plugin's).
    The first arrival is at 0.
    """
    if rate <= 0:
        raise ValueError("rate must be positive")
    if count is None and duration_s is None:
        raise ValueError("give count or duration_s")
    if math.isinf(rate):  # --rate inf: every request at t0 (bounded by the concurrency cap, if any)
        if count is None:
            raise ValueError("an infinite rate needs a request count")
        return [0] * count
    if kind not in ARRIVALS:
        raise ValueError(f"unknown arrival process '{kind}'; known: {', '.join(ARRIVALS.names())}")
    process = ARRIVALS.get(kind)
    rng = random.Random(seed)
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
        t = process(rng, rate, burstiness, len(out) - 1, t)
    return out
