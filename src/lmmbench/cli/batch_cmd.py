"""`lmmbench batch PLAN`: run a plan (YAML or CSV) of spec / perf / eval / serve rows on an executor."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import BaseModel, ConfigDict, Field

from lmmbench.config.cli_options import command_from_model

__all__ = ["BatchConfig", "register"]


class BatchConfig(BaseModel):
    """Options of `lmmbench batch`."""

    model_config = ConfigDict(extra="forbid")

    plan: Path = Field(description="Plan file: YAML (rows: [...]) or CSV (name,kind,model,options,executor,"
                       "requirements,image).")
    executor: str | None = Field(None, description="Run every row on this executor (inprocess, subprocess, venv, "
                                 "container, ray; default: each row's, else the plan's).")
    out_dir: Path | None = Field(None, description="Rows go to <out-dir>/<plan>/<row>/ (default: the plan's).")
    workers: int | None = Field(None, ge=1, description="Local pool: CPU slots (one per GPU when GPUs exist).")
    max_retries: int | None = Field(None, ge=0, description="Re-runs of a row whose worker crashed or was killed.")
    ray_address: str | None = Field(None, description="Join this Ray cluster (default: start a local one).")
    constraints: Path | None = Field(None, description="pip constraints for venv / container installs "
                                     "(default: lmmbench's constraints.txt).")
    dry_run: bool = Field(False, description="Print the resolved runs and exit.")
    rerun: bool = Field(False, description="Run finished rows again (default: skip rows whose status is ok).")
    resume: bool = Field(False, description="Continue interrupted rows where they stopped (perf: finished points "
                         "kept; run: measured rows skipped; eval: predictions kept) instead of starting them again.")


def _batch(cfg: BatchConfig) -> None:
    import json

    from lmmbench.executors.jobs import SERVER_URL_PLACEHOLDER
    from lmmbench.executors.plan import load_plan
    from lmmbench.executors.runner import resolve_plan, run_plan

    overrides = {"out_dir": cfg.out_dir, "workers": cfg.workers, "max_retries": cfg.max_retries}
    plan = load_plan(cfg.plan, overrides)
    if cfg.constraints is not None:  # read now, not when the first venv row installs
        from lmmbench.config.input_files import read_text

        read_text(cfg.constraints, "constraints file")
    if cfg.dry_run:
        for row in plan.rows:
            if row.kind in ("serve", "proxy"):
                typer.echo(f"{row.name}: {row.kind} {json.dumps(row.options)} (started for the rows that use it)")
        for job in resolve_plan(plan, cfg.executor):
            what = f"run {job.spec}" if job.kind == "run" else job.kind
            env = f" requirements={job.requirements}" if job.requirements else ""
            env += f" image={job.image}" if job.image else ""
            config = json.dumps(job.config).replace(SERVER_URL_PLACEHOLDER, "<url of the serve row>")
            typer.echo(f"{job.name}: {what} on {job.executor}{env} -> {job.row_dir}\n  {config}")
        return

    def echo(r: object) -> None:
        from lmmbench.executors.jobs import RowResult

        assert isinstance(r, RowResult)
        tail = f" ({r.error})" if r.error else ""
        wall = "" if r.wall_s is None else f" {r.wall_s:.1f} s"
        tries = f", attempt(s) {r.attempts}" if r.attempts else ""
        typer.echo(f"[batch] {r.name}: {r.kind} {r.status} on {r.executor}{tries}{wall}{tail}", err=True)

    run = run_plan(plan, cfg.executor, rerun=cfg.rerun, resume=cfg.resume, ray_address=cfg.ray_address,
                   constraints=cfg.constraints, echo=echo)  # fmt: skip
    for warning in run.warnings:
        typer.echo(warning, err=True)
    if run.skipped:
        typer.echo(f"already done (not run again): {', '.join(run.skipped)}")
    typer.echo(closing_counts([r.status for r in run.results], [r.name for r in run.results])
               + f"; table: {run.summary_csv} and {run.summary_html}; report: {run.report_html} and {run.report_md}")
    if run.interrupted:
        raise KeyboardInterrupt  # exit 130 / 143 (SIGTERM), every plan file written
    from lmmbench.core.exit_codes import plan_exit_code

    code = plan_exit_code((r.status == "failed", "unexpected" in (r.error or "")) for r in run.results)
    if code:
        raise typer.Exit(code)


def closing_counts(statuses: list[str], names: list[str]) -> str:
    """The closing line's counts, each status apart: ``N ok, N failed, N skipped, N interrupted (names)``."""
    count = {s: statuses.count(s) for s in ("ok", "failed", "skipped", "interrupted")}
    cut = [n for n, s in zip(names, statuses, strict=True) if s == "interrupted"]
    return (f"{count['ok']} ok, {count['failed']} failed, {count['skipped']} skipped"
            + (f", {count['interrupted']} interrupted ({', '.join(cut)})" if cut else ""))


def register(app: typer.Typer) -> None:
    """Add ``lmmbench batch``."""
    command_from_model(app, "batch", BatchConfig, _batch, positional=("plan",), with_config_file=False,
                       help="Run a plan of runs (spec / perf / eval / serve rows) in-process, in subprocesses, "
                       "venvs, containers or on Ray. Results in <out-dir>/<plan>/.")
