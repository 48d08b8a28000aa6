"""Running a plan: resolve rows, skip finished ones, start serve (then proxy) rows, hand rows to executors, join.

Layout: ``<out_dir>/<plan>/<row>/`` holds each row's usual output (spec / eval / perf folder), its
``status.json`` (written as soon as the row ends; a row whose status is ``ok`` is skipped when the
plan runs again) and its worker logs. ``<out_dir>/<plan>/plan.json`` lists every row's result (the
file a run index reads) and ``plan_summary.csv`` / ``plan_summary.html`` join them in one table.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.executors.base import EXECUTORS, ExecutorSettings
from lmmbench.executors.jobs import (
    SERVER_URL_PLACEHOLDER,
    TIMING_KINDS,
    Job,
    RowResult,
    resolve_job,
    write_result,
)
from lmmbench.executors.plan import Plan, PlanRow
from lmmbench.executors.pool import interrupted_result
from lmmbench.executors.schedule import run_in_stages
from lmmbench.executors.servers import RunningServer, is_command_line, server_config, start_server, with_upstream

__all__ = ["STATUS_NAME", "PlanRun", "mark_contention", "resolve_plan", "run_plan"]

STATUS_NAME = "status.json"


@dataclass
class PlanRun:
    """What a plan run did: every row's result in plan order, which were skipped, the table files."""

    plan_dir: Path
    results: list[RowResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    summary_csv: Path | None = None
    summary_html: Path | None = None
    report_html: Path | None = None
    report_md: Path | None = None
    warnings: list[str] = field(default_factory=list)
    interrupted: bool = False  # a stop signal cut the plan short (the caller exits 143 / 130)


def _executor_of(plan: Plan, row: PlanRow, override: str | None) -> str:
    name = override or row.executor or plan.executor
    if name not in EXECUTORS:
        raise UserError(f"executor: unknown '{name}'; known: {', '.join(EXECUTORS.names())}")
    return name


def resolve_plan(plan: Plan, executor: str | None = None, urls: dict[str, str] | None = None,
                 results: dict[str, RowResult] | None = None) -> list[Job]:  # fmt: skip
    """Validate every run row into a ``Job`` (serve rows' URLs are placeholders until they start; the hand-off
    ``{rows.NAME.folder}`` is filled from ``results``, the rows ended so far)."""
    from lmmbench.executors.row_checks import check_row_fields
    from lmmbench.executors.stages import check_needs, fill_handoff, handoff_fields

    check_needs(plan.source or plan.name, plan)
    plan_dir = (plan.out_dir / plan.name).resolve()
    jobs = []
    for n, row in enumerate(plan.rows, start=1):
        if row.kind in ("serve", "proxy"):
            try:
                check_row_fields(row, "background")
                server_config(row)
            except UserError as exc:
                raise UserError(f"{plan.source or plan.name}: row {n} '{row.name}': {exc}") from None
            continue
        url = (urls or {}).get(row.server or "", SERVER_URL_PLACEHOLDER) if row.server else None
        srv = next((r for r in plan.rows if r.name == row.server), None)
        if srv is not None and srv.kind == "proxy":  # the model is the one its upstream serve row serves
            srv = next((r for r in plan.rows if r.name == srv.options.get("upstream")), None)
        if row.kind == "perf" and row.model is None and srv is not None and srv.model and is_command_line(srv):
            row = row.model_copy(update={"model": srv.model})  # an engine serves the model under the name it got
        folders = None if results is None else {k: r.folder for k, r in results.items()}
        handoff = handoff_fields("options", row.needs, plan_dir, folders)
        try:
            row = row.model_copy(update={"options": fill_handoff(row.options, handoff,
                                                                 ("command",) if row.kind == "command" else ())})
            name = _executor_of(plan, row, executor)
            check_row_fields(row, name)
            if name == "venv" and row.isolation is None and plan.isolation is not None:
                row = row.model_copy(update={"isolation": plan.isolation})
            jobs.append(resolve_job(row, plan_dir / row.name, name, url, handoff))
        except UserError as exc:
            raise UserError(f"{plan.source or plan.name}: row {n} '{row.name}': {exc}") from None
    return jobs


def _previous(row_dir: Path) -> RowResult | None:
    path = row_dir / STATUS_NAME
    if not path.is_file():
        return None
    try:
        return RowResult.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError:
        return None


def _with_continued(job: Job, continued: dict[str, dict[str, Any]]) -> Job:
    """``job`` with the options that continue its interrupted earlier attempt (``batch --resume``), if any."""
    return job.model_copy(update={"config": {**job.config, **continued.get(job.name, {})}})


def _finished(row_dir: Path) -> RowResult | None:
    result = _previous(row_dir)
    return result if result is not None and result.status == "ok" else None


def _continued(job: Job) -> dict[str, Any] | None:
    """``job`` set to continue the run an interrupted earlier attempt left in its folder (perf: finished points
    kept, the stopped one measured again; a spec's run: measured rows skipped; eval: the predictions made), or
    None when there is nothing to continue (not interrupted, or stopped before its run had a folder)."""
    prev = _previous(Path(job.row_dir))
    if prev is None or prev.status != "interrupted":
        return None
    if job.kind == "eval":  # an eval stopped mid-way reports no folder: its newest run with predictions
        made = any(f.stat().st_size for f in Path(job.row_dir).glob("*/predictions/*.jsonl"))
        return {"resume": "latest"} if made else None
    if not prev.folder or not Path(prev.folder).is_dir():
        return None
    return {"resume": True, "overwrite": False}


def _start_servers(plan: Plan, needed: set[str], plan_dir: Path, servers: dict[str, RunningServer],
                   failed: dict[str, str]) -> None:  # fmt: skip
    """Start the needed serve rows, then the needed proxy rows in front of them, into ``servers`` (filled as each
    is ready, so a stop meanwhile stops them)."""
    for kind in ("serve", "proxy"):
        for row in plan.rows:
            if row.name not in needed or row.kind != kind:
                continue
            upstream = str(row.options.get("upstream", ""))
            if kind == "proxy" and upstream in failed:
                failed[row.name] = f"its upstream serve row '{upstream}' did not start"
                continue
            try:
                servers[row.name] = start_server(with_upstream(row, {n: s.url for n, s in servers.items()}),
                                                 plan_dir / row.name)  # fmt: skip
            except UserError as exc:
                failed[row.name] = str(exc)


def _stop_servers(servers: dict[str, RunningServer], rows: dict[str, PlanRow], t0: int, interrupted: bool,
                  finish: Callable[[RowResult], None]) -> None:  # fmt: skip
    """Stop every serve row at once (SIGTERM to each group, SIGKILL after ``stop_grace_s``) and record them."""
    from lmmbench.executors.servers import stop_servers

    stopped = stop_servers(list(servers.values()))
    for (name, srv), metrics in zip(servers.items(), stopped, strict=True):
        finish(RowResult(name=name, kind=rows[name].kind, status="interrupted" if interrupted else "ok",
                         executor="background",
                         model=rows[name].model, folder=str(srv.log_path.parent),
                         wall_s=(time.perf_counter_ns() - t0) / 1e9, metrics={"url": srv.url, **metrics},
                         error="the plan was interrupted" if interrupted else None))  # fmt: skip


def _check_local_gpus(jobs: list[Job], source: str) -> None:
    """Refuse a row on this machine (every executor but Ray, whose cluster is checked by its ``prepare``) that
    asks for more GPUs than this machine has."""
    local = [(j.name, j.num_gpus) for j in jobs if j.num_gpus > 0 and j.executor != "ray"]
    if local:
        from lmmbench.executors.gpus import check_gpu_requests, discover_gpus

        try:
            check_gpu_requests(local, len(discover_gpus()), "this machine")
        except UserError as exc:
            raise UserError(f"{source}: {exc}") from None


def _failed(job: Job, error: str) -> RowResult:
    return RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor, model=job.model,
                     error=error)


def _prepare(executors: dict[str, Any], jobs: list[Job], finish: Callable[[RowResult], None]) -> list[Job]:
    """The checks that can run before any row: each executor's ``prepare`` (venvs built, interpreters found)
    fails only the rows it cannot run, up front; then its ``start``, in the driver's main thread (Ray joins its
    cluster there: ``ray.init`` sets signal handlers that only the main thread can put back, and the executor's
    rows run in a thread of their own); an executor that cannot start fails its rows with the cause. The rows
    that passed are returned."""
    ready: list[Job] = []
    for name, group in _by_executor(jobs).items():
        prepare = getattr(executors[name], "prepare", None)
        passed = prepare(group, finish) if prepare is not None else group
        start = getattr(executors[name], "start", None)
        if passed and start is not None:
            try:
                start()
            except UserError as exc:
                for job in passed:
                    finish(_failed(job, str(exc)))
                passed = []
        ready += passed
    return ready


def _cleanup(executors: dict[str, Any]) -> None:
    """Each executor's ``cleanup`` (the container executor removes the images the plan built)."""
    for executor in executors.values():
        cleanup = getattr(executor, "cleanup", None)
        if cleanup is not None:
            cleanup()


def _by_executor(jobs: list[Job]) -> dict[str, list[Job]]:
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.executor, []).append(job)
    return groups


def _run_group(executor: Any, group: list[Job], finish: Callable[[RowResult], None],
               done: dict[str, RowResult]) -> None:
    """Run one executor's rows; an executor that fails as a whole (no cluster, no engine) fails its
    unfinished rows with the cause, and the plan goes on."""
    try:
        executor.run(group, finish)
    except UserError as exc:
        error = str(exc)
    except Exception as exc:  # a bug in an executor: its rows say so (exit 1), the plan files are still written
        error = f"unexpected {type(exc).__name__} in the executor: {exc}".splitlines()[0][:500]
    else:
        return
    for job in group:
        if job.name not in done:
            finish(_failed(job, error))


def _record_unstarted(pending: list[Job], needed: set[str], done: dict[str, RowResult],
                      finish: Callable[[RowResult], None]) -> None:  # fmt: skip
    """After an interruption: the rows that never started (and serve rows stopped while starting) say so; the
    next ``batch`` runs them."""
    for job in pending:
        if job.name not in done:
            finish(interrupted_result(job, "not started: the plan was interrupted"))
    for name in sorted(needed - set(done)):
        finish(RowResult(name=name, kind="serve", status="interrupted", executor="background",
                         error="stopped while starting: the plan was interrupted"))


def _pending(jobs: list[Job], rerun: bool, resume: bool, run: PlanRun, done: dict[str, RowResult],
             continued: dict[str, dict[str, Any]]) -> list[Job]:  # fmt: skip
    """The jobs to run: not finished before (all with ``rerun``), each from an empty folder, or with ``resume``
    an interrupted row continuing its run (its options' changes put in ``continued``)."""
    pending: list[Job] = []
    for job in jobs:
        prev = None if rerun else _finished(Path(job.row_dir))
        if prev is not None:
            done[job.name] = prev
            run.skipped.append(job.name)
        elif resume and (update := _continued(job)) is not None:
            continued[job.name] = update
            pending.append(job)
        else:  # unfinished or --rerun: start from an empty folder, never append to an old run's files
            shutil.rmtree(job.row_dir, ignore_errors=True)
            pending.append(job)
    return pending


def run_plan(plan: Plan, executor: str | None = None, *, rerun: bool = False, resume: bool = False,
             ray_address: str | None = None, constraints: Path | None = None,
             echo: Callable[[RowResult], None] | None = None) -> PlanRun:  # fmt: skip
    """Run every row of ``plan`` not finished before (all of them with ``rerun``; interrupted rows continuing
    their runs with ``resume``); write status and table. A stop signal stops every row and server (the plan's
    files are still written) and sets ``interrupted`` on the returned run."""
    plan_dir = (plan.out_dir / plan.name).resolve()
    jobs = resolve_plan(plan, executor)  # fails on any bad row before anything runs
    if rerun and resume:
        raise UserError("--rerun and --resume: choose one (--rerun starts every row again, --resume continues "
                        "interrupted rows)")
    run = PlanRun(plan_dir)
    done: dict[str, RowResult] = {}
    continued: dict[str, dict[str, Any]] = {}
    pending = _pending(jobs, rerun, resume, run, done, continued)
    rows = {r.name: r for r in plan.rows}
    plan_dir.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    def finish(result: RowResult) -> None:
        with lock:
            done[result.name] = result
            write_result(result, plan_dir / result.name / STATUS_NAME)
            if echo is not None:
                echo(result)

    _check_local_gpus(pending, plan.source or plan.name)
    settings = ExecutorSettings(plan_dir, plan.workers, plan.max_retries, ray_address, constraints)
    executors = {name: EXECUTORS.get(name)(settings) for name in {j.executor for j in pending}}
    try:
        pending = _prepare(executors, pending, finish)
    except BaseException:  # stopped while a venv or an image was being built: what was built goes
        _cleanup(executors)
        raise
    needed = {s for j in pending if (s := rows[j.name].server)}
    needed |= {str(rows[s].options.get("upstream")) for s in needed if rows[s].kind == "proxy"} & set(rows)
    server_errors: dict[str, str] = {}
    servers: dict[str, RunningServer] = {}
    t0 = time.perf_counter_ns()
    try:
        _start_servers(plan, needed, plan_dir, servers, server_errors)
        urls = {name: s.url for name, s in servers.items()}
        by_name = {j.name: j for j in resolve_plan(plan, executor, urls)}
        runnable: list[Job] = []
        for job in pending:
            server = rows[job.name].server
            if server in server_errors:
                finish(_failed(job, f"serve row '{server}': {server_errors[server]}"))
            else:
                runnable.append(_with_continued(by_name[job.name], continued))

        def run_group(name: str, group: list[Job], report: Callable[[RowResult], None]) -> None:
            _run_group(executors[name], group, report, done)

        def refresh(wave: list[Job]) -> list[Job]:  # the hand-off filled in from the rows ended so far
            if not any(j.needs for j in wave):
                return wave
            fresh = {j.name: j for j in resolve_plan(plan, executor, urls, dict(done))}
            return [_with_continued(fresh[j.name], continued) for j in wave]

        run_in_stages(runnable, done, finish, refresh, executors, run_group)
    except KeyboardInterrupt:  # SIGINT, or SIGTERM raised as one: the rows were stopped by their executor
        run.interrupted = True
    finally:
        _stop_servers(servers, rows, t0, run.interrupted, finish)
        _cleanup(executors)
        for name, err in server_errors.items():
            finish(RowResult(name=name, kind=rows[name].kind, status="failed", executor="background", error=err))
    if run.interrupted:
        _record_unstarted(pending, needed, done, finish)
    run.warnings = mark_contention([done[j.name] for j in pending if j.name in done],
                                   {n: r.server for n, r in rows.items()}, finish)  # fmt: skip
    for row in plan.rows:  # a serve row not needed this time keeps its earlier status
        if row.name not in done and (prev := _finished(plan_dir / row.name)) is not None:
            done[row.name] = prev
    run.results = [done[r.name] for r in plan.rows if r.name in done]
    _write_plan_files(plan, run)
    return run


def mark_contention(results: list[RowResult], servers: dict[str, str | None],
                    finish: Callable[[RowResult], None]) -> list[str]:  # fmt: skip
    """A timing row whose start-end interval overlapped another row's on the same machine (its own serve row
    aside) gets ``contention`` naming them, its status rewritten; returns one warning per such row."""
    warnings = []
    for r in results:
        if r.kind not in TIMING_KINDS or r.started_at_s is None or r.ended_at_s is None:
            continue
        beside = [o.name for o in results if o.name not in (r.name, servers.get(r.name)) and o.host == r.host
                  and o.started_at_s is not None and o.ended_at_s is not None
                  and o.started_at_s < r.ended_at_s and r.started_at_s < o.ended_at_s]  # fmt: skip
        if not beside:
            continue
        note = f"ran beside row(s) {', '.join(beside)} on {r.host}: its timings were not the machine's alone"
        if r.contention:
            note = f"{r.contention}; {note}"
        finish(r.model_copy(update={"contention": note}))
        warnings.append(f"warning: row '{r.name}' {note}")
    return warnings


def _write_plan_files(plan: Plan, run: PlanRun) -> None:
    from lmmbench.reports.plan_report import write_plan_reports
    from lmmbench.reports.plan_summary import write_plan_summary

    rows = [r.model_dump(mode="json") for r in run.results]
    (run.plan_dir / "plan.json").write_text(json.dumps(
        {"plan": plan.model_dump(mode="json"), "skipped": run.skipped, "rows": rows}, indent=2) + "\n",
        encoding="utf-8")  # fmt: skip
    run.summary_csv, run.summary_html = write_plan_summary(rows, run.plan_dir, f"lmmbench plan {plan.name}")
    run.report_html, run.report_md = write_plan_reports(rows, run.plan_dir, f"lmmbench plan {plan.name}")
