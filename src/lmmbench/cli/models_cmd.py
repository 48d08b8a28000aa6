"""`lmmbench models list | build`: the built-in tiny models."""

from __future__ import annotations

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

    @models_app.command("build")
    def build(
        names: list[str] = typer.Argument(None, help="Models to build (default: all)."),
        force: bool = typer.Option(False, "--force", help="Rebuild even if already built."),
    ) -> None:
        """Build the built-in models into $LMMBENCH_HOME/models (default ~/.cache/lmmbench)."""
        from lmmbench.models.tiny import TINY_MODEL_NAMES, build_tiny_model

        for name in names or list(TINY_MODEL_NAMES):
            path = build_tiny_model(name, force=force)
            typer.echo(f"{name}: {path}")

    app.add_typer(models_app, name="models")
