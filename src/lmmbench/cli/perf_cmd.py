"""`lmmbench perf [run|search]`: load-test an OpenAI-compatible server (open or closed loop)."""

from __future__ import annotations

import typer

from lmmbench.config.cli_options import command_from_model
from lmmbench.config.perf import PerfConfig


def _run(cfg: PerfConfig) -> None:
    from lmmbench.sessions.perf_session import run_perf

    if cfg.action == "recover":
        from lmmbench.core.errors import UserError
        from lmmbench.sessions.perf_recover import recover_perf

        if cfg.recover_dir is None:
            raise UserError("usage: lmmbench perf recover RUN_DIR (a folder under <out-dir>/perf/)")
        for path in recover_perf(cfg.recover_dir):
            typer.echo(f"wrote {path}")
        return
    if run_perf(cfg).interrupted:
        raise KeyboardInterrupt  # exit 130 once every file is written


def register(app: typer.Typer) -> None:
    """Add ``lmmbench perf``."""
    command_from_model(
        app,
        "perf",
        PerfConfig,
        _run,
        positional=("action", "recover_dir"),
        help="Load-test an OpenAI-compatible server: `perf` measures, `perf search` finds the highest "
        "load meeting --slo, `perf recover RUN_DIR` rebuilds the reports of a killed run. "
        "Results in <out-dir>/perf/<run-name>/.",
    )
