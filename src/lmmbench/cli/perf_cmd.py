"""`lmmbench perf [run|search]`: load-test an OpenAI-compatible server (open or closed loop)."""

from __future__ import annotations

import typer

from lmmbench.config.cli_options import command_from_model
from lmmbench.config.perf import PerfConfig


def _run(cfg: PerfConfig) -> None:
    from lmmbench.sessions.perf_session import run_perf

    run = run_perf(cfg)
    sent, ok = run.request_counts()
    if ok == 0:
        typer.echo(f"error: no request succeeded ({sent} sent) -> {run.run_dir}", err=True)
        raise typer.Exit(1)
    if ok < sent:
        typer.echo(f"[perf] {sent - ok} of {sent} request(s) failed", err=True)


def register(app: typer.Typer) -> None:
    """Add ``lmmbench perf``."""
    command_from_model(
        app,
        "perf",
        PerfConfig,
        _run,
        positional=("action",),
        help="Load-test an OpenAI-compatible server: `perf` measures, `perf search` finds the highest "
        "load meeting --slo. Results in <out-dir>/perf/<run-name>/.",
    )
