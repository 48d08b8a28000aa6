"""``perf search``: the load bisected against the SLO, each probe one load point of the run."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.loadgen.api import LATENESS_WARN_MS, LoadResult
from lmmbench.loadgen.search import CLIENT_LIMITED, ProbeOutcome, SearchResult, search_max_load
from lmmbench.sessions.perf.points import point_config

__all__ = ["client_late", "run_search"]


def client_late(res: LoadResult) -> bool:
    """True when the client could not keep the schedule of this point (the lateness warning)."""
    late = res.summary.metrics["lateness_ms"].p99
    return bool(late == late and late > LATENESS_WARN_MS)  # NaN (nothing sent): not late


def run_search(base: PerfConfig, one: Callable[[int, PerfConfig], LoadResult],
               results: list[LoadResult]) -> tuple[SearchResult, dict[str, Any]]:  # fmt: skip
    """Bisect the load (``results``: the run's points so far, numbering the probes); a failure the client
    flagged as late is probed again once, and twice late makes the probe client-limited (it says nothing
    about the server). Returns the result and its ``search`` section of report.json and run.json."""
    integer = base.search_mode == "concurrency"
    probe_base = base
    if base.num_requests is None and base.duration_s is None:
        probe_base = base.model_copy(update={"duration_s": 10.0})

    def probe(x: float) -> ProbeOutcome:
        key = "rate" if not integer else "concurrency"
        for attempt in (1, 2):
            point = {key: int(x) if integer else x, "labels": {"search_probe": len(results), "attempt": attempt}}
            res = one(len(results), point_config(probe_base, point))
            if res.interrupted:
                raise KeyboardInterrupt
            passed = bool(res.summary.slo_attainment >= base.slo_attainment)
            if passed or not client_late(res):  # a late pass is a pass: lateness only adds latency
                return passed
            if attempt == 1:
                print(f"[perf] search: {x:g} failed while the client was late; probing it again", file=sys.stderr)
        return CLIENT_LIMITED

    sr = search_max_load(probe, base.search_low, base.search_high, base.search_iterations, integer)
    unit = "req/s" if not integer else "concurrent clients"
    section = {"mode": base.search_mode, "slo": base.slo, "attainment": base.slo_attainment,
               "best": sr.best, "lowest_failing": sr.lowest_failing, "gap": sr.gap,
               "probes": sr.probes, "client_limited": sr.client_limited,
               "limited_by": sr.verdict, "verdict": sr.describe(unit)}  # fmt: skip
    print(f"[perf] search: {sr.describe(unit)}", file=sys.stderr)
    return sr, section
