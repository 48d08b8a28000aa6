"""Telemetry of a perf run: the server-metrics / GPU sampler started before the points and stopped after."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.request_records import RequestRecord

__all__ = ["finish_telemetry", "start_telemetry"]


def start_telemetry(cfg: PerfConfig, run_dir: Path) -> Any:
    """A started ``TelemetrySampler`` writing into ``run_dir``; None with ``--telemetry-interval-s 0``."""
    if cfg.telemetry_interval_s <= 0:
        return None
    from lmmbench.loadgen.telemetry import TelemetrySampler

    return TelemetrySampler(cfg.url, run_dir, cfg.telemetry_interval_s).start()


def finish_telemetry(sampler: Any, cfg: PerfConfig, run_dir: Path, records: list[RequestRecord]) -> list[Path]:
    """Stop the sampler; telemetry.jsonl and, with plots, telemetry.png (the HTML report shows it)."""
    from lmmbench.loadgen.telemetry import read_telemetry

    files = [sampler.stop()]
    for note in sampler.notes:
        print(f"[perf] {note}", file=sys.stderr)
    if not sampler.data_rows:  # neither server metrics nor a GPU: nothing was measured
        files[0].unlink(missing_ok=True)
        return []
    if cfg.plots:
        from lmmbench.reports.telemetry_plot import plot_telemetry

        png = plot_telemetry(run_dir, read_telemetry(files[0]), records)
        files += [png] if png is not None else []
    return files
