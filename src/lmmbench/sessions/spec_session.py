"""A spec run, as a library call: run a named experiment and write its folder.

Output: ``<out-dir>/<spec>/{<spec>_results.csv, <spec>_summary.csv, <spec>_plot.png,
<spec>_analysis.json, run.json, report.html}``. The CLI (`lmmbench run <spec>`), the tests and
plan executors all call ``run_spec``; it prints nothing but the runner's progress bar.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SpecRun", "run_spec"]

log = logging.getLogger(__name__)


@dataclass
class SpecRun:
    """What a spec run produced: its folder, counts, rows and analysis."""

    spec_dir: Path
    name: str
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    interrupted: bool = False
    rows: list[dict[str, Any]] = field(default_factory=list)
    analysis: dict[str, Any] = field(default_factory=dict)
    total_field: str | None = None
    unattributed_field: str | None = None
    measured_this_run: int = 0


def run_spec(spec_name: str, options: Any) -> SpecRun:
    """Run ``spec_name`` with validated ``options``; writes ``<out-dir>/<spec>`` and returns what it measured.

    A Ctrl-C during the measurements still writes every file from the rows measured so far; the
    returned ``SpecRun`` then has ``interrupted=True``.
    """
    from lmmbench.config.input_files import prepare_out_dir
    from lmmbench.core.clock import wall_label
    from lmmbench.reports import ResultsCsv, build_analysis, read_rows, run_record, write_json, write_summary
    from lmmbench.reports.plots import plot_breakdown
    from lmmbench.specs import BASE_COLUMNS, SPECS, RunStats, SpecContext, UnifiedRunner

    spec = SPECS.get(spec_name)()
    spec_dir = Path(options.out_dir) / spec.name
    _claim_folder(spec_dir, spec.name, options)
    prepare_out_dir(spec_dir)
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
    ok_total, failed_total = file_counts(rows)
    run_stats = {"ok": ok_total, "failed": failed_total, "measured_this_run": stats.ok,
                 "failed_this_run": stats.failed, "skipped_already_done": stats.skipped, "rows": len(rows),
                 "interrupted": interrupted}
    record = run_record(spec.name, config, ctx.environment, started, run_stats)
    write_json(spec_dir / "run.json", record, float_digits=6)
    from lmmbench.reports.html_report import write_reports

    write_reports("spec", spec_dir, spec.name)  # report.html; a failure is a logged warning
    return SpecRun(spec_dir, spec.name, ok_total, failed_total, stats.skipped, interrupted, rows, analysis,
                   spec.total_field, spec.unattributed_field, stats.ok)


def file_counts(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """(measured, failed) (sample, repeat) pairs of a results file: a pair that failed and was measured
    on a resume counts as measured once; a failed one counts once however often it failed."""
    ok = {(r.get("sample_id"), r.get("repeat")) for r in rows if r.get("status") == "ok"}
    failed = {(r.get("sample_id"), r.get("repeat")) for r in rows if r.get("status") != "ok"} - ok
    return len(ok), len(failed)


_RUN_FILES = ("run.json", "report.html")


def _claim_folder(spec_dir: Path, name: str, options: Any) -> None:
    """Refuse to write into a folder that holds a run, unless --resume (continue) or --overwrite (replace)."""
    from lmmbench.core.errors import UserError

    held = [p for p in (spec_dir / f"{name}_results.csv", *(spec_dir / f for f in _RUN_FILES)) if p.exists()]
    if not held or options.resume:
        return
    if not getattr(options, "overwrite", False):
        raise UserError(f"{spec_dir} already holds a run ({held[0].name}); pass --resume to continue it, "
                        f"--overwrite to replace it, or another --out-dir")
    for p in [*spec_dir.glob(f"{name}_*"), *(spec_dir / f for f in _RUN_FILES)]:
        if p.is_file():
            p.unlink()
