"""`lmmbench serve`: the built-in OpenAI-compatible server (options derived from ``ServeConfig``)."""

from __future__ import annotations

import typer

from lmmbench.config.cli_options import command_from_model
from lmmbench.serve.server import ServeConfig


def _serve(cfg: ServeConfig) -> None:
    from lmmbench.models.shapes import weights_provenance
    from lmmbench.serve.server import serve

    if weights_provenance(cfg.model) is not None:
        typer.echo(f"weights: RANDOM (shape-only model {cfg.model}): latencies are real, every answer is noise")
    serve(cfg)


def register(app: typer.Typer) -> None:
    """Add ``lmmbench serve``."""
    command_from_model(app, "serve", ServeConfig, _serve)
