"""`lmmbench perf [run|search]`: load-test an OpenAI-compatible server (open or closed loop)."""

from __future__ import annotations

import sys
from typing import Any

import typer

from lmmbench.config.cli_options import command_from_model
from lmmbench.config.perf.options import PerfConfig
from lmmbench.config.perf.vllm import VLLM_ONLY_FIELDS

_vllm_flags_used: list[str] = []

VLLM_NOTE = (
    "[perf] note: vLLM-style flags ({flags}): perf keeps its own defaults (--ignore-eos on, 100 requests, one "
    "client without --rate or --max-concurrency); to run a vllm bench serve command line as vLLM runs it, use "
    "lmmbench bench serve (docs/perf.md, 'Coming from vLLM')"
)


def _note_aliases(flags: list[str]) -> None:
    _vllm_flags_used[:] = flags  # called on every invocation, before the options are validated


def _run(cfg: PerfConfig) -> None:
    from lmmbench.sessions.perf.session import run_perf

    if cfg.action == "recover":
        from lmmbench.core.errors import UserError
        from lmmbench.sessions.perf.recover import recover_perf

        if cfg.recover_dir is None:
            raise UserError("usage: lmmbench perf recover RUN_DIR (a folder under <out-dir>/perf/)")
        for path in recover_perf(cfg.recover_dir):
            typer.echo(f"wrote {path}")
        return
    used = list(_vllm_flags_used) + sorted("--" + f.replace("_", "-") for f in cfg.model_fields_set & VLLM_ONLY_FIELDS)
    _vllm_flags_used.clear()
    if used:
        print(VLLM_NOTE.format(flags=", ".join(used)), file=sys.stderr)
    if cfg.models:  # several endpoints: one run folder each and one comparison table
        from lmmbench.sessions.perf.models import run_models

        for run in run_models(cfg):
            report_perf_run(run)
        return
    report_perf_run(run_perf(cfg))


def report_perf_run(run: Any) -> None:
    """Exit as a perf run should: 130 when interrupted, NOTHING_MEASURED when no request succeeded."""
    if run.interrupted:
        raise KeyboardInterrupt  # exit 130 once every file is written
    if run.already_finished:  # --resume of a finished run: nothing to measure, and nothing failed
        return
    sent, ok = run.request_counts()
    if sent == 0 and run.accuracy is not None:  # a workload of test_perf false: its accuracy check was the run
        return
    if ok == 0:  # failed requests are part of a load test's measurement; none succeeding means nothing measured
        from lmmbench.core.exit_codes import NOTHING_MEASURED

        typer.echo(f"error: no request succeeded ({sent} sent) -> {run.run_dir}", err=True)
        raise typer.Exit(NOTHING_MEASURED)
    if ok < sent:
        typer.echo(f"[perf] {sent - ok} of {sent} request(s) failed", err=True)


def register(app: typer.Typer) -> None:
    """Add ``lmmbench perf``."""
    command_from_model(
        app,
        "perf",
        PerfConfig,
        _run,
        positional=("action", "recover_dir"),
        help="Load-test an OpenAI-compatible server: `perf` measures, `perf search` finds the highest "
        "load meeting --slo, `perf recover RUN_DIR` rebuilds the reports of a killed run. "
        "Results in <out-dir>/perf/<run-name>/.",
    )
