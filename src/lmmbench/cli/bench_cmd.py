"""`lmmbench bench serve ARGS` / `bench sglang ARGS` / `bench ais ARGS`: drop-ins for `vllm bench serve`, `python -m
sglang.bench_serving` and `ais_bench` (the work: sessions/dropins/vllm_session.py, sessions/dropins/sglang_session.py,
sessions/dropins/ais_session.py)."""

from __future__ import annotations

from typing import Any

import typer

__all__ = ["register"]


_DROP_IN = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _finish(text: str, run: Any, file_line: str | None) -> None:
    """Print what the peer prints, then lmmbench's exit-code rule (docs/reliability.md)."""
    from lmmbench.core.exit_codes import NOTHING_MEASURED

    if text:
        typer.echo(text)
    if file_line is not None:
        typer.echo(file_line, err=True)
    if run.interrupted:
        raise KeyboardInterrupt  # exit 130 once what was measured is written
    if run.ok == 0:
        typer.echo(f"error: no request succeeded ({run.sent} sent) -> {run.run_dir}", err=True)
        raise typer.Exit(NOTHING_MEASURED)


def register(app: typer.Typer) -> None:
    """Add ``lmmbench bench serve``, ``lmmbench bench sglang`` and ``lmmbench bench ais``."""
    bench = typer.Typer(help="Drop-ins for the peers' benchmark commands, on lmmbench's load generator.",
                        no_args_is_help=True)  # fmt: skip

    @bench.command("serve", context_settings=_DROP_IN,
                   help="Run `vllm bench serve ARGS` unchanged (vLLM 0.33.0's flags, defaults, printed table and "
                        "result file); --help lists the flags.")  # fmt: skip
    def serve(ctx: typer.Context) -> None:
        from lmmbench.sessions.dropins.vllm_session import run_bench_serve

        run = run_bench_serve(list(ctx.args))
        _finish(run.table, run, f"result file: {run.result_file}" if run.result_file is not None else None)

    @bench.command("sglang", context_settings=_DROP_IN,
                   help="Run `python -m sglang.bench_serving ARGS` unchanged (SGLang 0.5.23's flags, defaults, "
                        "printed summary and output file); --help lists the flags.")  # fmt: skip
    def sglang(ctx: typer.Context) -> None:
        from lmmbench.sessions.dropins.sglang_session import run_bench_sglang

        run = run_bench_sglang(list(ctx.args))
        _finish(run.summary, run, None)

    @bench.command("ais", context_settings=_DROP_IN,
                   help="Run an `ais_bench ARGS` command line (AISBench 3.1's flags and config files: VLLMCustomAPI / "
                        "VLLMCustomAPIChat models, gsm8k data sets; outputs in AISBench's layout); --help lists the "
                        "flags.")  # fmt: skip
    def ais(ctx: typer.Context) -> None:
        from lmmbench.core.exit_codes import NOTHING_MEASURED
        from lmmbench.sessions.dropins.ais_session import run_bench_ais

        run = run_bench_ais(list(ctx.args))
        if run.text:
            typer.echo(run.text)
        if run.inferred and run.sent and run.ok == 0:
            typer.echo(f"error: no request succeeded ({run.sent} sent) -> {run.run_dir}", err=True)
            raise typer.Exit(NOTHING_MEASURED)
        if run.inferred and run.sent > run.ok:  # partial: said, scored as wrong answers (AISBench's rule)
            typer.echo(f"warning: {run.sent - run.ok} of {run.sent} requests failed (predictions/<model>/"
                       f"<data set>_failed.jsonl) -> {run.run_dir}", err=True)

    app.add_typer(bench, name="bench")
