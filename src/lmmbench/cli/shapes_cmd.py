"""Printing for `lmmbench models shapes` and `lmmbench models build shape:NAME` (the work is models/shapes.py)."""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["build_shape", "print_shapes"]

RANDOM_WEIGHTS_LINE = ("weights: RANDOM (shape-only model {name}, from {source}): timings and memory are real, "
                       "every model output is meaningless")


def print_shapes() -> None:
    """One line per shipped shape: name, family, the card's parameter total, built or not; then its source."""
    from lmmbench.models.shapes import load_shape_spec, random_weights_info, shape_model_dir, shape_names

    typer.echo(f"{'name':24s} {'family':22s} {'card total':>10s}  built  what it is")
    for name in shape_names():
        spec = load_shape_spec(name)
        built = "yes" if random_weights_info(shape_model_dir(name)) else "no"
        params = f"{spec.published_params_b:g} B" if spec.published_params_b else ""
        typer.echo(f"{'shape:' + name:24s} {spec.family:22s} {params:>10s}  {built:5s}  {spec.description}")
        typer.echo(f"{'':24s} source: {spec.source}")
    from lmmbench.models.vla import VLA_SHAPES, count_vla_parameters

    for cfg in VLA_SHAPES.values():  # policies, not transformers models: built in memory by episodic-eval
        params = f"{cfg.published_params_b:g} B" if cfg.published_params_b else ""
        typer.echo(f"{'shape:' + cfg.name:24s} {'vla (policy)':22s} {params:>10s}  -      "
                   f"{count_vla_parameters(cfg) / 1e9:.3g} B on the meta device; "
                   f"run episodic-eval --env pusht --policy {cfg.name}")
        typer.echo(f"{'':24s} source: {cfg.source}")
    typer.echo("Random weights: for latency and memory studies only. Quick CPU variant: "
               "lmmbench models build shape:NAME --num-layers 1")


def build_shape(name: str, num_layers: int | None, out: Path | None, device: str, dtype: str, force: bool) -> None:
    """Build one shape (or its reduced-depth variant) and print where it went."""
    from lmmbench.models.shapes import build_shape_model, load_shape_spec, random_weights_info

    spec = load_shape_spec(name)
    path = build_shape_model(name, device=device, dtype=dtype, num_layers=num_layers, out=out, force=force)
    info = random_weights_info(path) or {}
    layers = f", every tower cut to {num_layers} layer(s)" if num_layers else ""
    typer.echo(f"shape:{spec.name}{layers}: {path} ({info.get('parameters', 0) / 1e9:.2f} B parameters, "
               f"{info.get('dtype')}, random weights); use it with --model {path}")
