"""The load generator: arrival processes, the event-loop driver, multi-process fan-out.

Python API::

    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.loadgen import run_benchmark

    result = run_benchmark(PerfConfig(url="http://127.0.0.1:8000", model="m", concurrency=8, num_requests=64))
    result.summary.metrics["ttft_ms"].p99      # a metrics.perf_summary.PerfSummary
    result.summary.to_dict()                   # as report.json writes it
"""

from lmmbench.loadgen.api import LoadResult, Preflight, preflight, run_benchmark
from lmmbench.loadgen.arrivals import arrival_offsets_ns

__all__ = ["LoadResult", "Preflight", "arrival_offsets_ns", "preflight", "run_benchmark"]
