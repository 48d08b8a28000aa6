"""`lmmbench run <spec>` and `lmmbench specs`: run a named experiment, write its files.

One sub-command per registered spec, its options derived from the spec's options model; the run
itself is ``lmmbench.sessions.spec_session.run_spec``, this module only parses and prints.
Output: ``<out-dir>/<spec>/{<spec>_results.csv, <spec>_summary.csv, <spec>_plot.png,
<spec>_analysis.json, run.json, report.html}``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import typer

from lmmbench.config.cli_options import command_from_model

__all__ = ["register"]

log = logging.getLogger(__name__)


def _run(spec_name: str, options: Any) -> None:
    from lmmbench.core.exit_codes import NOTHING_MEASURED, PARTIAL, measured_exit_code

    """Run the spec through the library and print its outcome."""
    from lmmbench.sessions.spec_session import run_spec

    run = run_spec(spec_name, options)
    _report(run.spec_dir, run.name, run, run.analysis)
    _notes(options, run.analysis, run.total_field or "ttft_ms")
    if run.unattributed_field and options.progress:
        _table(run.rows, run.analysis, run.total_field or "ttft_ms")
    if run.interrupted:
        raise KeyboardInterrupt
    counts = run.row_counts()
    code = measured_exit_code(0 if run.measured_nothing else 1, counts["failed"] + counts["degraded"])
    if code == NOTHING_MEASURED:  # nothing measured ok: not a success, whatever was written
        from lmmbench.core.exit_codes import failure_reason

        reason = failure_reason(str(r.get("error") or "") for r in run.rows if r.get("status") != "ok")
        why = f": {reason}" if reason else ""
        typer.echo(f"error: no row measured ok ({counts['failed']} failed, {counts['degraded']} degraded){why} "
                   f"-> {run.spec_dir}", err=True)
    elif code == PARTIAL:
        typer.echo(f"partial: {counts['failed']} row(s) failed and {counts['degraded']} degraded -> {run.spec_dir}",
                   err=True)
    elif isinstance(run.analysis.get("negative_verdict"), str):  # a comparison asked for found a difference
        from lmmbench.core.exit_codes import NOT_EQUIVALENT

        typer.echo(f"{run.analysis['negative_verdict']} -> {run.spec_dir}", err=True)
        code = NOT_EQUIVALENT
    if code:
        raise typer.Exit(code)


def _report(spec_dir: Path, name: str, stats: Any, analysis: dict[str, Any]) -> None:
    state = " (interrupted)" if getattr(stats, "interrupted", False) else ""
    typer.echo(f"{name}{state}: {stats.ok} measured ({stats.measured_this_run} in this run, {stats.skipped} "
               f"already done), {stats.degraded} degraded, {stats.failed} failed -> {spec_dir}")
    for hook, error in stats.dropped_hooks.items():
        typer.echo(f"  hook '{hook}' dropped: its stage is empty on every later row (degraded): {error}", err=True)
    if isinstance(analysis.get("finding"), str):  # a spec's one-line finding, in numbers
        typer.echo(f"  {analysis['finding']}")
    n_ok = analysis.get("rows_ok", 0)
    una = analysis.get("unattributed")
    worst = una.get("max_pct_per_sample") if una else None
    if una and isinstance(worst, float) and math.isfinite(worst):
        typer.echo(f"  unattributed: worst sample {worst:.2f} % of ttft_ms "
                   f"(goal <= {una['goal_pct']:g} %; from {n_ok} ok row(s))")
    for key, fit in analysis.get("fits", {}).items():
        r2 = fit.get("r2")
        if isinstance(r2, float) and math.isfinite(r2) and fit.get("n_samples", 0) >= 3:
            typer.echo(f"  fit {key}: {fit['slope_ms_per_unit']:.4g} ms/unit, R2={fit['r2']:.3f} "
                       f"({fit['n_samples']} samples, {n_ok} ok row(s))")
    if stats.failed:
        failures = analysis.get("failures", [])
        first: dict[str, Any] = next((f for f in failures if f.get("status") != "degraded"), {})
        typer.echo(f"  {stats.failed} row(s) failed, e.g. {first.get('sample_id')}: {first.get('error')}", err=True)


def _notes(options: Any, analysis: dict[str, Any], total_field: str) -> None:
    """Random weights, and stages whose repeats scatter by more than the CV limit."""
    from lmmbench.cli.shapes_cmd import RANDOM_WEIGHTS_LINE
    from lmmbench.metrics.noise import noise_warnings
    from lmmbench.models.shapes import weights_provenance

    info = weights_provenance(str(options.model))
    if info is not None:
        typer.echo("  " + RANDOM_WEIGHTS_LINE.format(name=info.get("name"), source=info.get("source", "its config")))
    for line in noise_warnings(analysis.get("repeat_noise", {}), total_field):
        typer.echo(f"  warning: {line}", err=True)


def _table(rows: list[dict[str, Any]], analysis: dict[str, Any], total: str) -> None:
    """Per-sample medians of the main stages, on the terminal."""
    from rich.console import Console
    from rich.table import Table

    from lmmbench.reports.summary import per_sample_medians

    cols = {"preprocess_ms": "preproc", "visual_encoder_ms": "visual", "audio_encoder_ms": "audio",
            "prefill_ms": "prefill", "others_ms": "others", total: total.removesuffix("_ms")}
    med = per_sample_medians(rows, list(cols))
    pcts = (analysis.get("unattributed") or {}).get("per_sample_pct", {})
    if not med:
        return
    table = Table("sample", *cols.values(), "unattr. %", title="ms, medians over repeats")
    for sid, m in med.items():
        pct = pcts.get(sid)
        table.add_row(sid, *(f"{m[c]:.1f}" for c in cols), "" if pct is None else f"{pct:.2f}")
    Console(stderr=True).print(table)


def register(app: typer.Typer) -> None:
    """Add ``run <spec>`` (one sub-command per spec) and ``specs``."""
    from lmmbench.specs import SPECS

    run_app = typer.Typer(help="Run a named experiment (spec); `lmmbench specs` lists them.",
                          no_args_is_help=True)
    for name in SPECS.names():
        spec_cls = SPECS.get(name)

        def handler(opts: Any, _name: str = name) -> None:
            _run(_name, opts)

        command_from_model(run_app, name, spec_cls.options_model, handler, help=spec_cls.help,
                           exclude=spec_cls.not_applicable)
    app.add_typer(run_app, name="run")

    @app.command("specs")
    def list_specs() -> None:
        """List the registered specs."""
        for spec_name in SPECS.names():
            typer.echo(f"{spec_name:20s} {SPECS.get(spec_name).help}")
