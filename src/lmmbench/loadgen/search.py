"""Find the highest load (rate or concurrency) that meets the SLOs, by bisection.

A probe answers pass / fail, or ``CLIENT_LIMITED``: it failed while the client itself could not keep
the schedule (its lateness was flagged, twice), so the failure says nothing about the server (a late
pass is still a pass: lateness only adds to the latencies charged to the server). Such a probe counts as
a failure for the bisection and the verdict says "client-limited" when it bounds the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["CLIENT_LIMITED", "ProbeOutcome", "SearchResult", "search_max_load"]

#: What a probe returns when the client, not the server, was the limit at that load.
CLIENT_LIMITED = "client-limited"
ProbeOutcome = bool | str


@dataclass
class SearchResult:
    """Best passing load, lowest failing load, and every probe as (load, passed)."""

    best: float | None
    lowest_failing: float | None
    probes: list[tuple[float, bool]] = field(default_factory=list)
    client_limited: list[float] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """``client-limited`` when the lowest failing load is one the client could not generate, else
        ``server-limited`` (a real failure bounds the answer), ``no-failure`` or ``no-pass``."""
        if self.best is None:
            return CLIENT_LIMITED if self.lowest_failing in self.client_limited else "no-pass"
        if self.lowest_failing is None:
            return "no-failure"
        return CLIENT_LIMITED if self.lowest_failing in self.client_limited else "server-limited"

    @property
    def gap(self) -> float | None:
        """Relative distance between the best pass and the lowest failure (how close it got)."""
        if self.best is None or self.lowest_failing is None:
            return None
        return (self.lowest_failing - self.best) / self.best

    def describe(self, unit: str) -> str:
        """One line for the user."""
        if self.verdict == CLIENT_LIMITED:
            best = "none" if self.best is None else f"{self.best:g} {unit}"
            return (f"client-limited: this client could not keep the schedule at {self.lowest_failing:g} {unit} "
                    f"(checked twice), so the server's limit is not separated from the client's; highest load "
                    f"measured meeting the SLOs: {best} (try --workers N or a faster client machine)")
        if self.best is None:
            return f"no load met the SLOs (lowest tried: {self.probes[0][0]:g} {unit})"
        if self.lowest_failing is None:
            return f"every load met the SLOs up to {self.best:g} {unit} (raise --search-high)"
        return (f"highest load meeting the SLOs: {self.best:g} {unit}; {self.lowest_failing:g} {unit} failed "
                f"(within {100 * (self.gap or 0):.1f} %)")  # fmt: skip


def search_max_load(
    probe: Callable[[float], ProbeOutcome], low: float, high: float, iterations: int, integer: bool = False
) -> SearchResult:
    """Probe ``low`` and ``high``, then bisect ``iterations`` times between the last pass and failure."""
    res = SearchResult(None, None)

    def run(x: float) -> bool:
        outcome = probe(x)
        if outcome == CLIENT_LIMITED:
            res.client_limited.append(x)
        ok = outcome is True
        res.probes.append((x, ok))
        if ok and (res.best is None or x > res.best):
            res.best = x
        if not ok and (res.lowest_failing is None or x < res.lowest_failing):
            res.lowest_failing = x
        return ok

    if integer:
        low, high = float(max(1, round(low))), float(max(1, round(high)))
    if not run(low):
        return res
    if run(high):
        return res
    lo, hi = low, high
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if integer:
            mid = float(round(mid))
            if mid in (lo, hi):
                break
        if run(mid):
            lo = mid
        else:
            hi = mid
    return res
