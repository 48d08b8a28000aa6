"""`lmmbench models list | shapes | build`: the built-in tiny models and the shape-only models."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add the ``models`` command group to ``app``."""
    models_app = typer.Typer(help="Built-in tiny models (built offline, random weights, fixed seed).",
                             no_args_is_help=True)

    @models_app.command("list")
    def list_models() -> None:
        """List the built-in models, their family and whether they are built."""
        from rich.console import Console
        from rich.table import Table

        from lmmbench.models.tiny import MARKER, TINY_DESCRIPTIONS, TINY_FAMILIES, TINY_MODEL_NAMES, tiny_model_dir

        table = Table("name", "family", "built", "path", "what it is")
        for name in TINY_MODEL_NAMES:
            path = tiny_model_dir(name)
            built = "yes" if (path / MARKER).is_file() else "no"
            table.add_row(name, TINY_FAMILIES[name], built, str(path), TINY_DESCRIPTIONS[name])
        Console().print(table)
        typer.echo("Any local Hugging Face model directory of these families works too: --model /path/to/dir")

    @models_app.command("shapes")
    def list_shapes() -> None:
        """List the shape-only models: published architectures with random weights (shape:NAME)."""
        from lmmbench.cli.shapes_cmd import print_shapes

        print_shapes()

    @models_app.command("build")
    def build(
        names: list[str] = typer.Argument(None, help="Models to build (default: all tiny models); "
                                          "shape:NAME builds a shape-only model."),
        force: bool = typer.Option(False, "--force", help="Rebuild even if already built."),
        num_layers: int = typer.Option(None, "--num-layers", min=1, help="shape:NAME only: cut every tower "
                                       "(LLM, vision, audio) to N layers, for quick CPU checks."),
        out: Path = typer.Option(None, "--out", help="shape:NAME only: write the model directory here."),
        device: str = typer.Option("auto", "--device", help="shape:NAME only: where the weights are created "
                                   "(auto | cpu | cuda)."),
        dtype: str = typer.Option("auto", "--dtype", help="shape:NAME only: weight dtype (auto: bfloat16 on "
                                  "CUDA, float32 on CPU; float32 | bfloat16 | float16)."),
    ) -> None:
        """Build models into $LMMBENCH_HOME/models (default ~/.cache/lmmbench): tiny ones, or shape:NAME."""
        from lmmbench.cli.shapes_cmd import build_shape
        from lmmbench.core.errors import UserError
        from lmmbench.models.tiny import TINY_MODEL_NAMES, build_tiny_model

        plain = [n for n in names or list(TINY_MODEL_NAMES) if not n.startswith("shape:")]
        given = {"--out": out, "--num-layers": num_layers}
        if plain and any(v is not None for v in given.values()):  # they were ignored, silently
            flags = ", ".join(k for k, v in given.items() if v is not None)
            raise UserError(f"{flags}: apply to shape:NAME only, not to {', '.join(plain)}; tiny models are built "
                            "into $LMMBENCH_HOME/models")  # fmt: skip
        for name in names or list(TINY_MODEL_NAMES):
            if name.startswith("shape:"):
                build_shape(name, num_layers=num_layers, out=out, device=device, dtype=dtype, force=force)
                continue
            path = build_tiny_model(name, force=force)
            typer.echo(f"{name}: {path}")

    app.add_typer(models_app, name="models")
