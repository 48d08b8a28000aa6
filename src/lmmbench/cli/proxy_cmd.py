"""`lmmbench proxy`: a measuring proxy in front of any OpenAI-compatible server (options from ``ProxyConfig``)."""

from __future__ import annotations

import typer

from lmmbench.config.cli_options import command_from_model
from lmmbench.serve.proxy.app import ProxyConfig


def _run(cfg: ProxyConfig) -> None:
    from lmmbench.serve.proxy.app import run_proxy

    run_proxy(cfg)


def register(app: typer.Typer) -> None:
    """Add ``lmmbench proxy``."""
    command_from_model(
        app,
        "proxy",
        ProxyConfig,
        _run,
        help="Run a measuring proxy in front of an OpenAI-compatible server: each answer carries server-side "
        "TTFT, TPOT, latency and peak GPU memory (metrics), as lmmbench serve returns them.",
    )
