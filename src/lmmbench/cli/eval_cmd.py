"""`lmmbench eval`, `lmmbench tasks` and `lmmbench reference dump|compare` (accuracy)."""

from __future__ import annotations

import typer

from lmmbench.config.cli_options import command_from_model


def _eval(cfg: object) -> None:
    from lmmbench.evaluation.modes import EvalConfig
    from lmmbench.sessions.eval.session import run_eval_compared

    assert isinstance(cfg, EvalConfig)
    if cfg.allow_random_weights and cfg.model:
        from lmmbench.models.shapes import weights_provenance

        if not cfg.model.startswith(("http://", "https://")) and weights_provenance(cfg.model):
            typer.echo("weights: RANDOM (shape-only model, --allow-random-weights): these scores mean nothing")
    if cfg.models:  # several models: one run folder each, one comparison table
        from lmmbench.sessions.eval.models import run_eval_models

        worst = 0
        for one in run_eval_models(cfg):
            try:
                _eval(one)
            except typer.Exit as exc:  # a model that failed: the others still run, the worst code is the exit
                worst = max(worst, int(exc.exit_code or 0))
        if worst:
            raise typer.Exit(worst)
        return
    if cfg.mode == "perf":  # AISBench's perf pipeline: the tasks' requests as a load test
        from lmmbench.cli.perf_cmd import report_perf_run
        from lmmbench.sessions.eval.perf import run_eval_perf

        report_perf_run(run_eval_perf(cfg))
        return
    run, comparison = run_eval_compared(cfg)
    for s in run.infer:
        typer.echo(
            f"infer {s['task']}: {s['done']} run, {s['skipped']} resumed, {s['errors']} failed, {s['wall_s']:.2f} s"
        )
    for r in run.results:
        parts = []
        for name, mv in r["metrics"].items():
            err = "" if mv["stderr"] is None else f" ± {mv['stderr']:.4f}"
            parts.append(f"{name}={mv['value']:.4f}{err}")
        typer.echo(f"{r['task']} ({r['n_samples']} samples, {r['n_errors']} failed): " + ", ".join(parts))
    from lmmbench.evaluation.modes import truncation_totals

    cut = {k: v for k, v in truncation_totals(run.results).items() if v}
    if cut:
        typer.echo("truncated: " + ", ".join(f"{v} {k}" for k, v in cut.items()) + " request(s) left-truncated to "
                   "the model's window, as lm-eval does (--no-truncate refuses them)", err=True)  # fmt: skip
    for line in comparison:
        typer.echo(f"[compare] {line}", err=True)
    typer.echo(f"run folder: {run.run_dir}")
    total, failed = run.sample_counts()
    from lmmbench.core.exit_codes import measured_exit_code

    if run.failed_everything:
        reason = run.failure_reason()
        why = f": {reason}" if reason else ""
        typer.echo(f"error: every sample failed ({failed} of {total}){why}; see {run.run_dir / 'logs'}", err=True)
        raise typer.Exit(measured_exit_code(0, failed))
    if failed:
        typer.echo(f"partial: {failed} of {total} sample(s) failed", err=True)
        raise typer.Exit(measured_exit_code(total - failed, failed))


def _tasks() -> None:
    """List the tasks lmmbench knows (shipped, in $LMMBENCH_HOME/tasks, and plugins)."""
    from lmmbench.evaluation.task_registry import list_tasks

    for t in list_tasks():
        if t.error:
            typer.echo(f"{t.name:20s} BROKEN  {t.error}")
            continue
        typer.echo(f"{t.name:20s} {t.kind:22s} {t.samples!s:>5} samples  metrics: {', '.join(t.metrics)}  [{t.path}]")
    from lmmbench.evaluation.lmms import LMMS_TASKS

    for name in LMMS_TASKS.names():  # lmms-eval's benchmarks: data from the Hugging Face cache, not counted here
        b = LMMS_TASKS.get(name)
        data = f"{b.dataset}" + (f" ({b.config})" if b.config else "") + f" {b.split}"
        typer.echo(f"{name:20s} {'lmms-eval ' + b.kind:22s} metrics: {', '.join(b.metrics)}  [{data}]")


def register(app: typer.Typer) -> None:
    """Add the accuracy commands to ``app``."""
    from lmmbench.evaluation.eval_config import EvalConfig
    from lmmbench.evaluation.reference.config import CompareConfig, DumpConfig

    command_from_model(app, "eval", EvalConfig, _eval)
    app.command(name="tasks", help="List the evaluation tasks lmmbench knows.")(_tasks)

    ref = typer.Typer(
        help="Logits / token diff against a reference device or backend.", no_args_is_help=True
    )

    def _dump(cfg: DumpConfig) -> None:
        from lmmbench.evaluation.reference.run import dump_reference

        path = dump_reference(cfg)
        typer.echo(f"reference written: {path}")

    def _compare(cfg: CompareConfig) -> None:
        from lmmbench.evaluation.reference.run import compare_reference, summary_line

        report = compare_reference(cfg)
        typer.echo(summary_line(report))
        typer.echo(f"report: {report['_path']}")

    command_from_model(ref, "dump", DumpConfig, _dump)
    command_from_model(ref, "compare", CompareConfig, _compare)
    app.add_typer(ref, name="reference")
