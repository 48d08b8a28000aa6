"""`perf`'s configuration: `PerfConfig` and its option groups, and workload files (lmmbench YAML, ByteMLPerf JSON).

``from lmmbench.config.perf import PerfConfig`` is the library's documented path; the model lives in ``options``.
"""

from lmmbench.config.perf.options import SLO_KEYS, PerfConfig

__all__ = ["SLO_KEYS", "PerfConfig"]
