"""Running a plan: resolve rows, skip finished ones, start serve rows, hand rows to executors, join.

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

from lmmbench.core.errors import UserError
from lmmbench.executors.base import EXECUTORS, ExecutorSettings
from lmmbench.executors.jobs import SERVER_URL_PLACEHOLDER, Job, RowResult, resolve_job, write_result
from lmmbench.executors.plan import Plan, PlanRow
from lmmbench.executors.servers import RunningServer, server_config, start_server

__all__ = ["STATUS_NAME", "PlanRun", "resolve_plan", "run_plan"]

STATUS_NAME = "status.json"


@dataclass
class PlanRun:
    """What a plan run did: every row's result in plan order, which were skipped, the table files."""

    plan_dir: Path
    results: list[RowResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    summary_csv: Path | None = None
    summary_html: Path | None = None


def _executor_of(plan: Plan, row: PlanRow, override: str | None) -> str:
    name = override or row.executor or plan.executor
    if name not in EXECUTORS:
        raise UserError(f"executor: unknown '{name}'; known: {', '.join(EXECUTORS.names())}")
    return name


def resolve_plan(plan: Plan, executor: str | None = None, urls: dict[str, str] | None = None) -> list[Job]:
    """Validate every run row into a ``Job`` (serve rows' URLs are placeholders until they start)."""
    plan_dir = (plan.out_dir / plan.name).resolve()
    jobs = []
    for n, row in enumerate(plan.rows, start=1):
        if row.kind == "serve":
            try:
                server_config(row)
            except UserError as exc:
                raise UserError(f"{plan.source or plan.name}: row {n} '{row.name}': {exc}") from None
            continue
        url = (urls or {}).get(row.server or "", SERVER_URL_PLACEHOLDER) if row.server else None
        try:
            jobs.append(resolve_job(row, plan_dir / row.name, _executor_of(plan, row, executor), url))
        except UserError as exc:
            raise UserError(f"{plan.source or plan.name}: row {n} '{row.name}': {exc}") from None
    return jobs


def _finished(row_dir: Path) -> RowResult | None:
    path = row_dir / STATUS_NAME
    if not path.is_file():
        return None
    try:
        result = RowResult.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError:
        return None
    return result if result.status == "ok" else None


def _start_servers(plan: Plan, needed: set[str], plan_dir: Path,
                   failed: dict[str, str]) -> dict[str, RunningServer]:  # fmt: skip
    servers: dict[str, RunningServer] = {}
    for row in plan.rows:
        if row.name in needed:
            try:
                servers[row.name] = start_server(row, plan_dir / row.name)
            except UserError as exc:
                failed[row.name] = str(exc)
    return servers


def run_plan(plan: Plan, executor: str | None = None, *, rerun: bool = False, ray_address: str | None = None,
             constraints: Path | None = None, echo: Callable[[RowResult], None] | None = None) -> PlanRun:  # fmt: skip
    """Run every row of ``plan`` not finished before (all of them with ``rerun``); write status and table."""
    plan_dir = (plan.out_dir / plan.name).resolve()
    jobs = resolve_plan(plan, executor)  # fails on any bad row before anything runs
    run = PlanRun(plan_dir)
    done: dict[str, RowResult] = {}
    pending: list[Job] = []
    for job in jobs:
        prev = None if rerun else _finished(Path(job.row_dir))
        if prev is not None:
            done[job.name] = prev
            run.skipped.append(job.name)
        else:  # unfinished or --rerun: start from an empty folder, never append to an old run's files
            shutil.rmtree(job.row_dir, ignore_errors=True)
            pending.append(job)
    rows = {r.name: r for r in plan.rows}
    needed = {s for j in pending if (s := rows[j.name].server)}
    plan_dir.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    def finish(result: RowResult) -> None:
        with lock:
            done[result.name] = result
            write_result(result, plan_dir / result.name / STATUS_NAME)
            if echo is not None:
                echo(result)

    server_errors: dict[str, str] = {}
    t0 = time.perf_counter_ns()
    servers = _start_servers(plan, needed, plan_dir, server_errors)
    try:
        urls = {name: s.url for name, s in servers.items()}
        by_name = {j.name: j for j in resolve_plan(plan, executor, urls)}
        groups: dict[str, list[Job]] = {}
        for job in pending:
            server = rows[job.name].server
            if server in server_errors:
                finish(RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor,
                                 model=job.model, error=f"serve row '{server}': {server_errors[server]}"))
                continue
            groups.setdefault(job.executor, []).append(by_name[job.name])
        settings = ExecutorSettings(plan_dir, plan.workers, plan.max_retries, ray_address, constraints)
        for name, group in groups.items():
            EXECUTORS.get(name)(settings).run(group, finish)
    finally:
        for name, srv in servers.items():
            srv.stop()
            finish(RowResult(name=name, kind="serve", status="ok", executor="background", model=rows[name].model,
                             folder=str(srv.log_path.parent), wall_s=(time.perf_counter_ns() - t0) / 1e9,
                             metrics={"url": srv.url}))  # fmt: skip
        for name, err in server_errors.items():
            finish(RowResult(name=name, kind="serve", status="failed", executor="background", error=err))
    for row in plan.rows:  # a serve row not needed this time keeps its earlier status
        if row.name not in done and (prev := _finished(plan_dir / row.name)) is not None:
            done[row.name] = prev
    run.results = [done[r.name] for r in plan.rows if r.name in done]
    _write_plan_files(plan, run)
    return run


def _write_plan_files(plan: Plan, run: PlanRun) -> None:
    from lmmbench.reports.plan_summary import write_plan_summary

    rows = [r.model_dump(mode="json") for r in run.results]
    (run.plan_dir / "plan.json").write_text(json.dumps(
        {"plan": plan.model_dump(mode="json"), "skipped": run.skipped, "rows": rows}, indent=2) + "\n",
        encoding="utf-8")  # fmt: skip
    run.summary_csv, run.summary_html = write_plan_summary(rows, run.plan_dir, f"lmmbench plan {plan.name}")
