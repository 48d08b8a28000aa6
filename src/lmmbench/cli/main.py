"""Entry point of the ``lmmbench`` command.

Each feature owns one ``cli/<feature>_cmd.py`` module with a ``register(app)`` function;
this module only assembles them and turns ``UserError`` into one line and exit code 2.
"""

from __future__ import annotations

import importlib
import logging
import sys

import typer

from lmmbench import __version__
from lmmbench.core.errors import UserError

# Feature modules, each adding its commands to the app. Imports stay light: heavy
# libraries are imported inside the command functions.
COMMAND_MODULES = [
    "lmmbench.cli.models_cmd",
    "lmmbench.cli.media_cmd",
    "lmmbench.cli.run_cmd",
    "lmmbench.cli.perf_cmd",
    "lmmbench.cli.testserver_cmd",
    "lmmbench.cli.serve_cmd",
    "lmmbench.cli.eval_cmd",
    "lmmbench.cli.batch_cmd",
]


def build_app() -> typer.Typer:
    """The typer app with every feature's commands registered."""
    app = typer.Typer(
        name="lmmbench",
        help="Speed, accuracy and stage-level TTFT breakdown for LLM, VLM and omni models.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )

    @app.callback(invoke_without_command=True)
    def _root(
        version: bool = typer.Option(False, "--version", help="Print the version and exit."),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
    ) -> None:
        logging.basicConfig(
            level=logging.DEBUG if verbose else logging.WARNING,
            format="%(levelname)s %(name)s: %(message)s",
        )
        if version:
            typer.echo(f"lmmbench {__version__}")
            raise typer.Exit(0)

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)
    return app


# Optional libraries -> the extra that installs them. A command that needs one which is missing
# fails with the pip line to run, from this one place, whatever module imported it.
EXTRA_OF_MODULE = {
    "torch": "models", "transformers": "models", "accelerate": "models", "av": "models", "PIL": "models",
    "soundfile": "models", "numpy": "models", "matplotlib": "plots", "fastapi": "serve", "uvicorn": "serve",
    "jinja2": "eval", "sacrebleu": "eval", "pandas": "eval", "pyarrow": "eval", "datasets": "eval",
    "aiohttp": "eval",
}


def missing_extra_message(exc: ModuleNotFoundError) -> str | None:
    """The one-line fix for a missing optional library, or None if it is not one of ours."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return f"this command needs '{top}', which is not installed: pip install -c constraints.txt 'lmmbench[{extra}]'"


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; bad input exits 2 with one line on stderr."""
    app = build_app()
    try:
        app(args=argv, standalone_mode=True)
    except SystemExit as exc:  # click's normal exit, --help, usage errors (2)
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        message = missing_extra_message(exc)
        if message is None:
            raise
        typer.echo(f"error: {message}", err=True)
        return 2
    except KeyboardInterrupt:
        typer.echo("interrupted: results written so far are kept", err=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
