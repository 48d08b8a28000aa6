"""Entry point of the ``lmmbench`` command.

Each feature owns one ``cli/<feature>_cmd.py`` module with a ``register(app)`` function;
this module only assembles them and is the one error boundary: bad input (``UserError``, a file
that is not UTF-8 or not CSV, a path that cannot be read or written) is one line and exit code 2;
an unexpected exception is one line naming a saved traceback file and exit code 1; Ctrl-C (SIGINT)
exits 130 and SIGTERM 143, both after the running command has flushed what it measured.
"""

from __future__ import annotations

import csv
import datetime as _dt
import importlib
import logging
import os
import signal
import sys
import traceback
from pathlib import Path
from types import FrameType

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
    "lmmbench.cli.serve_policy_cmd",
    "lmmbench.cli.proxy_cmd",
    "lmmbench.cli.eval_cmd",
    "lmmbench.cli.runs_cmd",
    "lmmbench.cli.batch_cmd",
    "lmmbench.cli.bench_cmd",
    "lmmbench.cli.envs_cmd",
]


def _show_help(ctx: typer.Context, value: bool) -> None:
    """The root's ``--help``: the help page, then exit 0."""
    if value and not ctx.resilient_parsing:
        typer.echo(ctx.get_help(), color=ctx.color)
        raise typer.Exit(0)


def build_app() -> typer.Typer:
    """The typer app with every feature's commands registered."""
    app = typer.Typer(
        name="lmmbench",
        help="Speed, accuracy and stage-level TTFT breakdown for LLM, VLM and omni models.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        add_help_option=False,  # ours below: typer's own shows a `<bool>` type label on the flag
    )

    @app.callback(invoke_without_command=True)
    def _root(
        version: bool = typer.Option(False, "--version", help="Print the version and exit.", metavar=""),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging.", metavar=""),
        limit: list[str] = typer.Option(
            [], "--limit", metavar="NAME=VALUE",
            help="Raise a bound of docs/reliability.md, e.g. --limit concurrency=200000 (repeatable).",
        ),
        _help: bool = typer.Option(False, "--help", help="Show this message and exit.", metavar="", is_eager=True,
                                   expose_value=True, callback=_show_help),
    ) -> None:
        _apply_limits(limit)
        logging.basicConfig(
            level=logging.DEBUG if verbose else logging.WARNING,
            format="%(levelname)s %(name)s: %(message)s",
        )
        from lmmbench.core.secrets import RedactingFilter, register_secret

        register_secret(os.environ.get("OPENAI_API_KEY"))
        for handler in logging.getLogger().handlers:
            handler.addFilter(RedactingFilter())
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
    "aiohttp": "eval", "sqlalchemy": "store", "mlflow": "tracking", "wandb": "tracking",
}


def missing_extra_message(exc: ModuleNotFoundError) -> str | None:
    """The one-line fix for a missing optional library, or None if it is not one of ours."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return f"this command needs '{top}', which is not installed: pip install -c constraints.txt 'lmmbench[{extra}]'"


def _apply_limits(items: list[str]) -> None:
    """``--limit name=value`` sets ``LMMBENCH_LIMIT_<NAME>`` for this process and its children."""
    from lmmbench.config.limits import LIMITS

    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in LIMITS:
            raise UserError(f"--limit {item!r}: expected name=value with a name of: {', '.join(LIMITS)}")
        os.environ[LIMITS[name].env_var] = value.strip()
    from lmmbench.config.input_files import raise_csv_field_limit
    from lmmbench.config.limits import limit_value

    known = {lim.env_var for lim in LIMITS.values()}
    for var in sorted(os.environ):  # a misspelt bound would be ignored: refused instead
        if var.startswith("LMMBENCH_LIMIT_") and var not in known:
            raise UserError(f"{var}: no such limit; the limits are LMMBENCH_LIMIT_<NAME> with NAME one of: "
                            f"{', '.join(n.upper() for n in LIMITS)} (docs/reliability.md)")  # fmt: skip
    for name in LIMITS:  # every bound from --limit and LMMBENCH_LIMIT_*, checked here: one line, exit 2
        limit_value(name)
    raise_csv_field_limit()


def _usage_line(exc: Exception) -> str:
    """A click usage error as one line: its message and where the command's help is."""
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "lmmbench"
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    return f"{' '.join(message.split())} (see `{path} --help`)"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is so that every ``except KeyboardInterrupt`` flush runs."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    from lmmbench.core.signals import record_stop_signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    record_stop_signal(signum)
    raise Terminated()


def _stopped(term: bool) -> int:
    from lmmbench.core.signals import exit_code_for_stop

    code = 143 if term else exit_code_for_stop()
    typer.echo(f"{'terminated' if code == 143 else 'interrupted'}: results written so far are kept", err=True)
    return code


def save_traceback(exc: BaseException) -> Path | None:
    """Write ``exc``'s traceback under ``$LMMBENCH_HOME/logs/`` and return its path (None if unwritable)."""
    home = os.environ.get("LMMBENCH_HOME")
    base = Path(home).expanduser() if home else Path.home() / ".cache" / "lmmbench"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = base / "logs" / f"crash-{stamp}-{os.getpid()}.txt"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"lmmbench {__version__}\nargv: {_redacted_argv()}\n\n"
            + "".join(traceback.format_exception(exc)), encoding="utf-8"
        )
    except OSError:
        return None
    return path


def _redacted_argv() -> str:
    from lmmbench.core.secrets import redact_argv

    return " ".join(redact_argv(sys.argv))


def _input_problem(exc: BaseException) -> str | None:
    """One line for exceptions that mean bad input or environment rather than a bug, else None."""
    if isinstance(exc, UnicodeDecodeError):
        return f"an input file is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
    if isinstance(exc, csv.Error):
        return f"a CSV input is malformed ({exc})"
    if isinstance(exc, OSError) and exc.filename is not None and not isinstance(exc, ConnectionError):
        return f"{exc.filename}: {exc.strerror or exc}"
    return None


def _click_kind(exc: BaseException) -> str | None:
    """'exit', 'abort' or 'usage' for the control-flow exceptions of click (or typer's vendored copy)."""
    names = {c.__name__ for c in type(exc).__mro__}
    if "Exit" in names:
        return "exit"
    if "Abort" in names:
        return "abort"
    if "ClickException" in names and hasattr(exc, "show"):
        return "usage"
    return None


def _unexpected(exc: BaseException) -> int:
    saved = save_traceback(exc)
    where = f"; traceback saved to {saved}" if saved else ""
    typer.echo(f"error: unexpected {type(exc).__name__}: {str(exc)[:300]}{where}", err=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run the CLI behind the one error boundary (see the module docstring for the exit codes)."""
    import lmmbench.config.input_files  # noqa: F401  (raises the csv module's field limit for every reader)

    app = build_app()
    from lmmbench.cli.runs_cmd import keep_side_separator

    argv = keep_side_separator(sys.argv[1:] if argv is None else list(argv))
    old_term = None
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        from lmmbench.core.signals import install_main_only

        try:  # acts in this process only: lm-eval's, datasets' or torch's forked workers keep the default
            old_term = install_main_only(signal.SIGTERM, _on_sigterm)
        except ValueError:  # not the main thread (tests calling main() from a worker thread)
            old_term = None
    try:
        result = app(args=argv, standalone_mode=False)
        if result == 130:  # typer's answer to a KeyboardInterrupt (Ctrl-C, or SIGTERM raised as Terminated)
            return _stopped(False)
        return result if isinstance(result, int) and not isinstance(result, bool) else 0
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except UserError as exc:
        from lmmbench.core.secrets import redact_text

        typer.echo(f"error: {redact_text(str(exc))}", err=True)  # a URL's user info, keys: never printed
        return exc.exit_code
    except ModuleNotFoundError as exc:
        message = missing_extra_message(exc)
        if message is None:
            return _unexpected(exc)
        typer.echo(f"error: {message}", err=True)
        return 2
    except KeyboardInterrupt as exc:
        return _stopped(isinstance(exc, Terminated))
    except Exception as exc:
        kind = _click_kind(exc)
        if kind == "exit":  # --version, --help
            return int(getattr(exc, "exit_code", 0))
        if kind == "abort":  # typer turns KeyboardInterrupt into Abort
            return _stopped(isinstance(exc.__cause__, Terminated))
        if kind == "usage":  # click's usage errors: one line (not its Usage / Try / Error block), exit 2
            typer.echo(f"error: {_usage_line(exc)}", err=True)
            return int(getattr(exc, "exit_code", 2))
        problem = _input_problem(exc)
        if problem is None:
            return _unexpected(exc)
        typer.echo(f"error: {problem}", err=True)
        return 2
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    return 0


if __name__ == "__main__":
    sys.exit(main())
