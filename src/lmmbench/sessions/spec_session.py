"""A spec run, as a library call: run a named experiment and write its folder.

Output: ``<out-dir>/<spec>/{<spec>_results.csv, <spec>_summary.csv, <spec>_plot.png,
<spec>_analysis.json, run.json, report.html}``. The CLI (`lmmbench run <spec>`), the tests and
plan executors all call ``run_spec``; it prints nothing but the runner's progress bar.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
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
    degraded: int = 0
    dropped_hooks: dict[str, str] = field(default_factory=dict)
    run_id: str = ""
    measured_this_run: int = 0

    def row_counts(self) -> dict[str, int]:
        """ok / degraded / failed rows in the results file (a resumed file's earlier rows included)."""
        counts = {"ok": 0, "degraded": 0, "failed": 0}
        for r in self.rows:
            status = str(r.get("status"))
            counts[status if status in counts else "failed"] += 1
        return counts

    @property
    def measured_nothing(self) -> bool:
        """No row of the run measured ``ok`` (every one failed or degraded, or there were none)."""
        return self.row_counts()["ok"] == 0


def _analysis(spec: Any, rows: list[dict[str, Any]], model: str) -> tuple[dict[str, Any], Any]:
    """The spec's analysis (fits, shares, its findings, repeat noise) and the model's random-weights
    provenance (None: real weights)."""
    from lmmbench.metrics.noise import repeat_noise
    from lmmbench.models.shapes import weights_provenance
    from lmmbench.reports import build_analysis

    analysis = build_analysis(spec.name, rows, spec.stage_fields, spec.fit_pairs, spec.total_field,
                              spec.unattributed_field, spec.fit_stat)  # fmt: skip
    analysis.update(spec.findings(rows, analysis))
    weights = weights_provenance(model)  # not None: a shape-only model, random weights
    analysis["repeat_noise"] = repeat_noise(rows, [spec.total_field, *spec.stage_fields])
    analysis["random_weights"] = weights is not None
    return analysis, weights


def run_spec(spec_name: str, options: Any) -> SpecRun:
    """Run ``spec_name`` with validated ``options``; writes ``<out-dir>/<spec>`` and returns what it measured.

    A Ctrl-C during the measurements still writes every file from the rows measured so far; the
    returned ``SpecRun`` then has ``interrupted=True``.
    """
    from lmmbench.config.input_files import prepare_out_dir
    from lmmbench.core.clock import wall_label
    from lmmbench.core.runs.log import write_run_log
    from lmmbench.reports import ResultsCsv, read_rows, run_record, write_json, write_summary
    from lmmbench.reports.plots import plot_breakdown
    from lmmbench.reports.run_info import run_files
    from lmmbench.sessions.previous_run import check_baseline
    from lmmbench.specs import BASE_COLUMNS, SPECS, RunStats, SpecContext, UnifiedRunner

    check_baseline(getattr(options, "baseline", None))
    spec = SPECS.get(spec_name)()
    spec_dir = Path(options.out_dir) / spec.name
    _claim_folder(spec_dir, spec.name, options)
    prepare_out_dir(spec_dir)
    ctx = SpecContext(options=options, spec_dir=spec_dir)
    started = wall_label()
    results_path = spec_dir / f"{spec.name}_results.csv"
    stats = RunStats()
    interrupted = False
    if options.resume:
        check_resumable(results_path, [*BASE_COLUMNS, *spec.columns])  # before setup loads anything
    try:
        cases = spec.setup(ctx)
        extras = list(dict.fromkeys(k for c in cases for k in c.extra))
        columns = list(dict.fromkeys([*BASE_COLUMNS, *extras, *spec.columns]))
        with ResultsCsv(results_path, columns, resume=options.resume) as sink:
            runner = UnifiedRunner(spec, ctx, sink.append, done=sink.done)
            try:
                stats = runner.run(cases, options.repeats, options.warmup, clear_cache=options.clear_cache,
                                   progress=options.progress, interleave=options.interleave,
                                   target_ci_pct=getattr(options, "target_ci_pct", None),
                                   max_repeats=getattr(options, "max_repeats", 30))
            except KeyboardInterrupt:
                interrupted = True
    finally:
        spec.teardown(ctx)
    rows: list[dict[str, Any]] = [dict(r) for r in read_rows(results_path)]
    fields = [c for c in sink.columns if c not in BASE_COLUMNS]  # the file's header (a resumed file's own)
    write_summary(rows, fields, spec_dir / f"{spec.name}_summary.csv")
    analysis, weights = _analysis(spec, rows, str(options.model))
    write_json(spec_dir / f"{spec.name}_analysis.json", analysis, float_digits=6)
    plot_path = spec_dir / f"{spec.name}_plot.png"
    if not spec.plot(rows, plot_path):
        plot_breakdown(rows, spec.stage_fields, spec.fit_pairs, plot_path, title=f"{spec.name}: {options.model}",
                       fit_stat=spec.fit_stat, preprocess_fields=spec.preprocess_fields)
    config = {"spec": spec.name, **options.model_dump(mode="json")}
    ok_total, degraded_total, failed_total = file_counts(rows)
    done = SpecRun(spec_dir, spec.name, ok_total, failed_total, stats.skipped, interrupted, rows, analysis,
                   spec.total_field, spec.unattributed_field, degraded=degraded_total,
                   dropped_hooks=dict(ctx.environment.get("dropped_hooks") or {}), measured_this_run=stats.ok)
    run_stats = {"ok": ok_total, "degraded": degraded_total, "failed": failed_total,
                 "measured_this_run": stats.ok, "degraded_this_run": stats.degraded, "failed_this_run": stats.failed,
                 "skipped_already_done": stats.skipped, "interrupted": interrupted, "rows": done.row_counts(),
                 "extra_repeats_for_target_ci": stats.extra_repeats, "target_ci_not_reached": stats.ci_not_reached}
    ctx.environment["random_weights"] = weights is not None
    if weights is not None:
        ctx.environment["model_weights"] = weights
    record = run_record(spec.name, config, ctx.environment, started, run_stats, rows)
    record.headline.update(spec.headline(analysis))
    write_run_log(spec_dir, record, index=False)
    from lmmbench.reports.html_report import write_reports
    from lmmbench.sessions.previous_run import print_comparison

    print_comparison(spec_dir, record, config.get("baseline"))  # comparison.json, shown by the report
    write_reports("spec", spec_dir, spec.name)  # report.html; a failure is a logged warning
    record.files = run_files(spec_dir)
    write_run_log(spec_dir, record)  # with report.html listed, and indexed in the run store
    done.run_id = record.run_id
    return done


def file_counts(rows: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(ok, degraded, failed) (sample, repeat) pairs of a results file: a pair that failed and was measured
    on a resume counts once, as its best outcome; a failed one counts once however often it failed."""
    def pairs(keep: Any) -> set[tuple[Any, Any]]:
        return {(r.get("sample_id"), r.get("repeat")) for r in rows if keep(r.get("status"))}

    ok = pairs(lambda st: st == "ok")
    degraded = pairs(lambda st: st == "degraded") - ok
    failed = pairs(lambda st: st not in ("ok", "degraded")) - ok - degraded
    return len(ok), len(degraded), len(failed)


def check_resumable(path: Path, columns: Sequence[str]) -> None:
    """Refuse (one line) a ``--resume`` of a results file whose header lacks columns the spec writes today,
    before anything is loaded: a file of an older layout (the TTFT breakdown's parts under their old names)
    cannot be continued, since its rows and the new ones would measure different quantities."""
    import csv
    import io

    from lmmbench.config.input_files import read_text
    from lmmbench.core.errors import UserError
    from lmmbench.core.ttft_names import LEGACY_PREFILL_PARTS

    if not path.is_file():
        return
    first = read_text(path, "results file").partition("\n")[0]
    header = next(csv.reader(io.StringIO(first)), [])
    missing = [c for c in columns if c not in header]
    if not header or not missing:
        return
    old = [c for c in header if c in LEGACY_PREFILL_PARTS]
    why = (f"it was written by an older lmmbench ({', '.join(old)} are today's "
           f"{', '.join(LEGACY_PREFILL_PARTS[c] for c in old)})" if old
           else f"the file lacks column(s) {', '.join(missing[:5])}")  # fmt: skip
    raise UserError(f"{path}: cannot --resume: {why}; use another --out-dir, or --overwrite to measure it again "
                    "(`lmmbench runs compare` reads the old run as it is)")


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
    import shutil

    for p in spec_dir.iterdir():  # everything the replaced run wrote (traces, replays, comparison), not just its CSVs
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
