"""`lmmbench bench serve ARGS` / `bench sglang ARGS`: drop-ins for `vllm bench serve` and `python -m
sglang.bench_serving` (the work: sessions/bench_serve_session.py, sessions/bench_sglang_session.py)."""

from __future__ import annotations

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``lmmbench bench serve``."""
    bench = typer.Typer(help="Drop-ins for the peers' benchmark commands, on lmmbench's load generator.",
                        no_args_is_help=True)  # fmt: skip

    @bench.command("serve", context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                              "help_option_names": []},
                   help="Run `vllm bench serve ARGS` unchanged (vLLM 0.33.0's flags, defaults, printed table and "
                        "result file); --help lists the flags.")  # fmt: skip
    def serve(ctx: typer.Context) -> None:
        from lmmbench.core.exit_codes import NOTHING_MEASURED
        from lmmbench.sessions.bench_serve_session import run_bench_serve

        run = run_bench_serve(list(ctx.args))
        if run.table:
            typer.echo(run.table)
        if run.result_file is not None:
            typer.echo(f"result file: {run.result_file}", err=True)
        if run.interrupted:
            raise KeyboardInterrupt  # exit 130 once what was measured is written
        if run.ok == 0:
            typer.echo(f"error: no request succeeded ({run.sent} sent) -> {run.run_dir}", err=True)
            raise typer.Exit(NOTHING_MEASURED)

    @bench.command("sglang", context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                               "help_option_names": []},
                   help="Run `python -m sglang.bench_serving ARGS` unchanged (SGLang 0.5.23's flags, defaults, "
                        "printed summary and output file); --help lists the flags.")  # fmt: skip
    def sglang(ctx: typer.Context) -> None:
        from lmmbench.core.exit_codes import NOTHING_MEASURED
        from lmmbench.sessions.bench_sglang_session import run_bench_sglang

        run = run_bench_sglang(list(ctx.args))
        if run.summary:
            typer.echo(run.summary)
        if run.ok == 0:
            typer.echo(f"error: no request succeeded ({run.sent} sent) -> {run.run_dir}", err=True)
            raise typer.Exit(NOTHING_MEASURED)

    app.add_typer(bench, name="bench")
