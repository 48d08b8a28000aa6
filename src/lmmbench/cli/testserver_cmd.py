"""`lmmbench testserver`: the shipped OpenAI-compatible server with injected latencies and faults."""

from __future__ import annotations

import typer

from lmmbench.config.cli_options import command_from_model
from lmmbench.config.perf.testserver import TestServerConfig


def _run(cfg: TestServerConfig) -> None:
    from lmmbench.testing.testserver import run_testserver

    typer.echo(
        f"lmmbench testserver on http://{cfg.host}:{cfg.port} model={cfg.model} ttft={cfg.ttft_ms} ms "
        f"itl={cfg.itl_ms} ms tokens/chunk={cfg.tokens_per_chunk} workers={cfg.workers}",
        err=True,
    )
    run_testserver(cfg)


def register(app: typer.Typer) -> None:
    """Add ``lmmbench testserver``."""
    command_from_model(
        app,
        "testserver",
        TestServerConfig,
        _run,
        help="Run an OpenAI-compatible test server with exact injected TTFT/ITL, usage and faults.",
    )
