"""`lmmbench runs list|show|compare|report|index`: find, read and compare runs in the run store.

The work is in ``lmmbench.core.runs.store`` (the index) and ``lmmbench.sessions.runs_session``
(comparison); this module parses and prints.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from lmmbench.config.cli_options import command_from_model
from lmmbench.config.runs import (
    SIDE_SEPARATOR,
    RunsCompareConfig,
    RunsIndexConfig,
    RunsListConfig,
    RunsReportConfig,
    RunsShowConfig,
)
from lmmbench.core.errors import UserError

__all__ = ["keep_side_separator", "register", "split_sides"]


def keep_side_separator(argv: list[str]) -> list[str]:
    """``runs compare|report A -- B``: the CLI parser drops a bare ``--``, so it becomes ``vs`` first."""
    if len(argv) >= 2 and argv[0] == "runs" and argv[1] in ("compare", "report") and "--" in argv:
        argv = list(argv)
        argv[argv.index("--")] = SIDE_SEPARATOR
    return argv


def split_sides(runs: Sequence[str]) -> list[tuple[list[str], list[str]]]:
    """(baseline side, candidate side) pairs: ``A1 A2 vs B1 B2`` pools; ``A B C`` compares B and C with A."""
    if SIDE_SEPARATOR in runs:
        i = list(runs).index(SIDE_SEPARATOR)
        a, b = list(runs[:i]), list(runs[i + 1 :])
        if not a or not b or SIDE_SEPARATOR in b:
            raise UserError("runs compare: give runs on both sides of one `--`, e.g. A1 A2 -- B1 B2")
        return [(a, b)]
    if len(runs) < 2:
        raise UserError("runs compare: give at least two runs (the first is the baseline)")
    return [([runs[0]], [r]) for r in runs[1:]]


def _store(url: str | None) -> Any:
    from lmmbench.core.runs.store import RunStore

    return RunStore.open(url)


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _list(cfg: RunsListConfig) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = _store(cfg.store).list(kind=cfg.kind, model=cfg.model, labels=cfg.label, since=cfg.since,
                                  until=cfg.until, limit=cfg.limit)  # fmt: skip
    if not rows:
        typer.echo("no runs in the store match")
        return
    table = Table("run id", "kind", "name", "model", "started", "ok", "failed", "headline", box=None)
    for r in rows:
        head = ", ".join(f"{k}={_fmt(v)}" for k, v in list(r.headline.items())[:3])
        status = " (interrupted)" if r.interrupted else ""
        table.add_row(r.run_id, r.kind, r.name + status, r.model or "", r.started_at or "", _fmt(r.ok),
                      _fmt(r.failed), head)  # fmt: skip
    Console(width=200).print(table)


def _show(cfg: RunsShowConfig) -> None:
    from lmmbench.core.runs.log import load_run_log

    stored = _store(cfg.store).get(cfg.run)
    log = load_run_log(Path(stored.path))
    if cfg.json_output:
        typer.echo(json.dumps(log.model_dump(mode="json"), indent=2, default=str))
        return
    typer.echo(f"{log.run_id}  {log.kind} {log.name}  model {log.model}  {log.started_at} -> {log.finished_at}")
    typer.echo(f"folder: {stored.path}")
    out = log.outcome
    typer.echo(f"outcome: {_fmt(out.ok)} ok, {_fmt(out.failed)} failed"
               + (", INTERRUPTED" if out.interrupted else "")
               + (f", failures {out.failures_by_kind}" if out.failures_by_kind else ""))  # fmt: skip
    measured = {k: v for k, v in log.measurement.model_dump().items() if v is not None}
    typer.echo("measurement: " + ", ".join(f"{k}={v}" for k, v in measured.items()))
    env = log.environment
    git = env.get("git") or {}
    typer.echo(f"environment: {env.get('cpu')} x{env.get('cpu_count')}, gpu {env.get('gpu')}, python "
               f"{env.get('python')}, git {git.get('commit')}{' (dirty)' if git.get('dirty') else ''}")
    for k, v in log.headline.items():
        typer.echo(f"  {k}: {_fmt(v)}")
    typer.echo(f"files: {len(log.files)} ({', '.join(log.files[:8])}{' ...' if len(log.files) > 8 else ''})")


def _print_comparison(result: Any, show_all: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=200)
    a = ", ".join(r.stored.run_id for r in result.side_a)
    b = ", ".join(r.stored.run_id for r in result.side_b)
    con.print(f"A (baseline): {a}\nB: {b}", highlight=False)
    if result.prompt_diff or result.config_diff or result.environment_diff:
        con.print("differences (metrics are compared on what the runs share):", highlight=False)
        for key, x, y in [*result.prompt_diff, *result.config_diff, *result.environment_diff]:
            con.print(f"  {key}: {x!r} -> {y!r}", highlight=False, markup=False)
    for note in result.not_shared:
        con.print(f"  not compared: {note}", highlight=False, markup=False)
    table = Table("group", "metric", "stat", "A", "B", "change", "95% interval", "verdict", box=None)
    for group, m in result.metrics:
        if not show_all and m.verdict in ("unchanged", "no interval") and m.statistic != "mean":
            continue
        ci = "" if m.ci_low is None else f"[{m.ci_low:+.1f}, {m.ci_high:+.1f}] {m.unit}"
        style = {"regression": "bold red", "improvement": "bold green"}.get(m.verdict, "")
        table.add_row(group, m.metric, m.statistic, _fmt(m.a), _fmt(m.b), f"{m.change:+.1f} {m.unit}", ci,
                      f"[{style}]{m.verdict}[/]" if style else m.verdict)  # fmt: skip
    con.print(table)
    if not any(math.isfinite(m.change) for _g, m in result.metrics):  # nothing checked: no count that implies it was
        con.print("no metric compared (the runs share no measured metric): no verdict", highlight=False)
        return
    con.print(f"{len(result.regressions)} regression(s), {len(result.improvements)} improvement(s) "
              f"(flagged when the interval excludes 0 and the change exceeds its threshold)", highlight=False)


def _compare(cfg: RunsCompareConfig) -> None:
    from lmmbench.metrics.compare import STATISTICS
    from lmmbench.sessions.runs_session import compare_runs

    unknown = [s for s in cfg.statistics if s not in STATISTICS]
    if unknown:
        raise UserError(f"--statistics: unknown {', '.join(unknown)}; known: {', '.join(STATISTICS)}")
    store = _store(cfg.store)
    regressed = False
    for side_a, side_b in split_sides(cfg.runs):
        result = compare_runs(side_a, side_b, thresholds=cfg.threshold, statistics=cfg.statistics,
                              resamples=cfg.resamples, seed=cfg.seed, store=store)  # fmt: skip
        _print_comparison(result, cfg.show_all)
        regressed |= bool(result.regressions)
    if regressed and cfg.fail_on_regression:
        raise typer.Exit(1)


def _report(cfg: RunsReportConfig) -> None:
    from lmmbench.reports.compare_html import write_comparison_page
    from lmmbench.sessions.runs_session import compare_runs

    store = _store(cfg.store)
    results = [compare_runs(a, b, thresholds=cfg.threshold, resamples=cfg.resamples, store=store)
               for a, b in split_sides(cfg.runs)]  # fmt: skip
    path = write_comparison_page(results, cfg.out)
    typer.echo(f"comparison page: {path}")


def _index(cfg: RunsIndexConfig) -> None:
    from lmmbench.core.runs.log import load_run_log

    store = _store(cfg.store)
    found = 0
    for top in cfg.folders:
        if not top.exists():
            raise UserError(f"{top}: no such folder")
        candidates = {p.parent for p in top.rglob("run.json")} | {p.parent.parent for p in top.rglob("config_*.json")
                                                                 if p.parent.name == "logs"}  # fmt: skip
        for folder in sorted(candidates):
            try:
                run_log = load_run_log(folder)
            except UserError as exc:
                typer.echo(f"skipped: {exc}", err=True)
                continue
            store.index(run_log, folder)
            found += 1
            typer.echo(f"indexed {run_log.run_id}  {folder}")
    typer.echo(f"{found} run(s) indexed in {store.url}")


def register(app: typer.Typer) -> None:
    """Add ``lmmbench runs ...``."""
    runs = typer.Typer(help="Find, show and compare runs (the run store).", no_args_is_help=True)
    command_from_model(runs, "list", RunsListConfig, _list, with_config_file=False)
    command_from_model(runs, "show", RunsShowConfig, _show, positional=("run",), with_config_file=False)
    command_from_model(runs, "compare", RunsCompareConfig, _compare, positional=("runs",))
    command_from_model(runs, "report", RunsReportConfig, _report, positional=("runs",))
    command_from_model(runs, "index", RunsIndexConfig, _index, positional=("folders",), with_config_file=False)
    app.add_typer(runs, name="runs")
