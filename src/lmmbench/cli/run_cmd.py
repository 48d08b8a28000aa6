"""`lmmbench run <spec>` and `lmmbench specs`: run a named experiment, write its files.

One sub-command per registered spec, its options derived from the spec's options model.
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

__all__ = ["register", "run_spec"]

log = logging.getLogger(__name__)


def run_spec(spec_name: str, options: Any) -> Path:
    """Run ``spec_name`` with validated ``options``; returns ``<out-dir>/<spec>``."""
    from lmmbench.core.clock import wall_label
    from lmmbench.reports import ResultsCsv, build_analysis, read_rows, run_record, write_json, write_summary
    from lmmbench.reports.plots import plot_breakdown
    from lmmbench.specs import BASE_COLUMNS, SPECS, RunStats, SpecContext, UnifiedRunner

    spec = SPECS.get(spec_name)()
    spec_dir = Path(options.out_dir) / spec.name
    spec_dir.mkdir(parents=True, exist_ok=True)
    ctx = SpecContext(options=options, spec_dir=spec_dir)
    started = wall_label()
    results_path = spec_dir / f"{spec.name}_results.csv"
    stats = RunStats()
    interrupted = False
    try:
        cases = spec.setup(ctx)
        extras = list(dict.fromkeys(k for c in cases for k in c.extra))
        columns = list(dict.fromkeys([*BASE_COLUMNS, *extras, *spec.columns]))
        with ResultsCsv(results_path, columns, resume=options.resume) as sink:
            runner = UnifiedRunner(spec, ctx, sink.append, done=sink.done)
            try:
                stats = runner.run(cases, options.repeats, options.warmup, clear_cache=options.clear_cache,
                                   progress=options.progress, interleave=options.interleave)
            except KeyboardInterrupt:
                interrupted = True
    finally:
        spec.teardown(ctx)
    rows: list[dict[str, Any]] = [dict(r) for r in read_rows(results_path)]
    fields = [c for c in sink.columns if c not in BASE_COLUMNS]  # the file's header (a resumed file's own)
    write_summary(rows, fields, spec_dir / f"{spec.name}_summary.csv")
    analysis = build_analysis(spec.name, rows, spec.stage_fields, spec.fit_pairs, spec.total_field,
                              spec.unattributed_field, spec.fit_stat)
    analysis.update(spec.findings(rows, analysis))
    write_json(spec_dir / f"{spec.name}_analysis.json", analysis, float_digits=6)
    plot_path = spec_dir / f"{spec.name}_plot.png"
    if not spec.plot(rows, plot_path):
        plot_breakdown(rows, spec.stage_fields, spec.fit_pairs, plot_path, title=f"{spec.name}: {options.model}",
                       fit_stat=spec.fit_stat, preprocess_fields=spec.preprocess_fields)
    config = {"spec": spec.name, **options.model_dump(mode="json")}
    run_stats = {"ok": stats.ok, "failed": stats.failed, "skipped_already_done": stats.skipped,
                 "interrupted": interrupted}
    record = run_record(spec.name, config, ctx.environment, started, run_stats)
    write_json(spec_dir / "run.json", record, float_digits=6)
    from lmmbench.reports.html_report import write_reports

    write_reports("spec", spec_dir, spec.name)  # report.html; a failure is a logged warning
    _report(spec_dir, spec.name, stats, analysis)
    if spec.unattributed_field and options.progress:
        _table(rows, analysis, spec.total_field)
    if interrupted:
        raise KeyboardInterrupt
    return spec_dir


def _report(spec_dir: Path, name: str, stats: Any, analysis: dict[str, Any]) -> None:
    typer.echo(f"{name}: {stats.ok} measured, {stats.failed} failed, {stats.skipped} already done -> {spec_dir}")
    una = analysis.get("unattributed")
    worst = una.get("max_pct_per_sample") if una else None
    if una and isinstance(worst, float) and math.isfinite(worst):
        typer.echo(f"  unattributed: worst sample {worst:.2f} % of ttft_ms "
                   f"(goal <= {una['goal_pct']:g} %)")
    for key, fit in analysis.get("fits", {}).items():
        r2 = fit.get("r2")
        if isinstance(r2, float) and math.isfinite(r2) and fit.get("n_samples", 0) >= 3:
            typer.echo(f"  fit {key}: {fit['slope_ms_per_unit']:.4g} ms/unit, R2={fit['r2']:.3f}")
    if stats.failed:
        first: dict[str, Any] = next(iter(analysis.get("failures", [])), {})
        typer.echo(f"  {stats.failed} row(s) failed, e.g. {first.get('sample_id')}: {first.get('error')}", err=True)


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
            run_spec(_name, opts)

        command_from_model(run_app, name, spec_cls.options_model, handler, help=spec_cls.help)
    app.add_typer(run_app, name="run")

    @app.command("specs")
    def list_specs() -> None:
        """List the registered specs."""
        for spec_name in SPECS.names():
            typer.echo(f"{spec_name:20s} {SPECS.get(spec_name).help}")
