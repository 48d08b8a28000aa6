"""A resolved row (``Job``) and how one runs in the current process (``execute_job``).

Every executor ends in ``execute_job``: in the driver (inprocess), in a fresh interpreter
(subprocess, venv, container: ``python -m lmmbench.executors.worker job.json``) or in a Ray task.
It calls the library sessions (``run_spec``, ``run_perf``, ``run_eval``), never the CLI, and
returns a JSON-able ``RowResult`` whose ``metrics`` are flat numbers for the plan's joined table.
"""

from __future__ import annotations

import json
import platform
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from lmmbench.config.loaders import parse_model
from lmmbench.core.errors import user_error_from_validation
from lmmbench.core.placeholders import Fields
from lmmbench.executors.plan import PlanRow

if TYPE_CHECKING:
    from lmmbench.metrics.perf_summary import PerfSummary

__all__ = ["SERVER_URL_PLACEHOLDER", "TIMING_KINDS", "Job", "RowResult", "config_model", "execute_job", "is_timing",
           "resolve_job", "validate_options", "write_result"]

SERVER_URL_PLACEHOLDER = "http://127.0.0.1:1/v1"  # stands in for a serve row's URL until it runs
TIMING_KINDS = ("perf", "run")  # rows whose numbers are durations: they get the machine to themselves


class Job(BaseModel):
    """One row, resolved: the validated options of its run (``out_dir`` is set where it runs)."""

    name: str
    kind: Literal["run", "perf", "eval", "command"]
    spec: str | None = None
    model: str | None = None
    config: dict[str, Any]
    row_dir: str
    executor: str
    requirements: list[str] = Field(default_factory=list)
    image: str | None = None
    python: str | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    needs: list[str] = Field(default_factory=list)
    isolation: Literal["isolated", "shared"] | None = None
    mounts: list[str] = Field(default_factory=list)


class RowResult(BaseModel):
    """What a row produced: ``ok``, ``failed`` or ``interrupted`` (stopped by a signal: what it measured is
    kept in its folder and metrics), the run's folder, flat metrics, an error line."""

    name: str
    kind: str
    status: Literal["ok", "failed", "skipped", "interrupted"]
    executor: str = ""
    model: str | None = None
    folder: str | None = None
    wall_s: float | None = None
    attempts: int = 1
    error: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    host: str | None = None  # the machine the row ran on
    started_at_s: float | None = None  # wall-clock start, Unix seconds (a label, not a timer)
    ended_at_s: float | None = None  # wall-clock end, Unix seconds (a label, not a timer)
    # what else ran beside this timing row when that could not be avoided (its numbers are not the machine's alone)
    contention: str | None = None


def is_timing(job: Job) -> bool:
    """True for a row whose numbers are durations (perf, a spec's run): it must not share the machine."""
    return job.kind in TIMING_KINDS


def config_model(kind: str, spec: str | None) -> type[BaseModel]:
    """The pydantic options model of a row kind (a spec's own for ``run``)."""
    if kind == "run":
        from lmmbench.specs import SPECS

        return SPECS.get(spec or "").options_model
    if kind == "eval":
        from lmmbench.evaluation.eval_config import EvalConfig

        return EvalConfig
    if kind == "command":
        from lmmbench.executors.stages import CommandRowConfig

        return CommandRowConfig
    from lmmbench.config.perf.options import PerfConfig

    return PerfConfig


def _spec_known(spec: str | None) -> bool:
    from lmmbench.specs import SPECS

    return spec in SPECS


def validate_options(model: type[BaseModel], data: dict[str, Any]) -> BaseModel:
    """``data`` validated into ``model``; the first error becomes ``options.<field>: <message>``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise user_error_from_validation(exc, field="options.{}", root="options") from None


def resolve_job(row: PlanRow, row_dir: Path, executor: str, server_url: str | None,
                handoff: Fields | None = None) -> Job:
    """Validate ``row``'s options into its run's config; ``server_url`` is its serve row's URL; ``handoff``: the
    ``{rows.NAME.*}`` fields of its needs (a command row's line is filled with them where it runs)."""
    if row.kind == "serve" or row.kind == "proxy":
        raise ValueError("serve and proxy rows are started by the plan, not run as jobs")
    data: dict[str, Any] = dict(row.options)
    if row.kind in ("run", "perf"):  # a row's folder is the plan's: a retried attempt replaces the killed one's
        data.setdefault("overwrite", True)
    if row.kind == "run":
        data.setdefault("progress", False)
        if row.model is not None:
            data["model"] = row.model
    elif row.kind == "command":
        data["handoff"] = {**(handoff.values if handoff is not None else {}),
                           **({"model": row.model} if row.model is not None else {})}
    elif row.kind == "eval":
        if server_url is not None:
            data["model"] = server_url
            if row.model is not None:
                data.setdefault("tokenizer", row.model)
        elif row.model is not None:
            data["model"] = row.model
    else:
        data.update(progress=False, run_name=data.get("run_name", "run"))
        if row.model is not None:
            data["model"] = row.model
        if server_url is not None:
            data["url"] = server_url
    if row.kind == "run" and row.requirements and not _spec_known(row.spec):
        config = data  # a plugin spec installed by the row's own requirements: validated where it runs
    else:
        cfg = validate_options(config_model(row.kind, row.spec), {**data, "out_dir": str(row_dir)})
        if row.kind == "eval":
            from lmmbench.evaluation.modes import check_group_by_options

            check_group_by_options(cfg)  # type: ignore[arg-type]
        if row.kind == "command":
            from lmmbench.executors.stages import check_command_line

            check_command_line(cfg, handoff.later if handoff is not None else frozenset())  # type: ignore[arg-type]
        config = cfg.model_dump(mode="json", exclude_unset=True)
        config.pop("out_dir", None)
    return Job(name=row.name, kind=row.kind, spec=row.spec, model=row.model, config=config, row_dir=str(row_dir),
               executor=executor, requirements=row.requirements, image=row.image, python=row.python,
               num_cpus=row.num_cpus, num_gpus=row.num_gpus, needs=row.needs, isolation=row.isolation,
               mounts=row.mounts)  # fmt: skip


def _run_metrics(job: Job, cfg: Any) -> tuple[str, dict[str, Any], bool]:
    """The run's folder, its flat metrics and whether a signal cut it short."""
    if job.kind == "command":
        from lmmbench.executors.stages import run_command_row

        return (*run_command_row(cfg), False)
    if job.kind == "run":
        from lmmbench.sessions.spec_session import run_spec

        srun = run_spec(job.spec or "", cfg)
        statuses: dict[str, int] = {}
        for r in srun.rows:
            key = f"rows_{r.get('status') or 'unknown'}"
            statuses[key] = statuses.get(key, 0) + 1
        return str(srun.spec_dir), {"rows": len(srun.rows), **statuses, "failed": srun.failed}, srun.interrupted
    if job.kind == "eval":
        from lmmbench.evaluation.modes import run_eval

        erun = run_eval(cfg, show_progress=False)
        out: dict[str, Any] = {}
        for r in erun.results:
            out[f"{r['task']}.n_samples"] = r["n_samples"]
            for metric, mv in r["metrics"].items():
                out[f"{r['task']}.{metric}"] = mv["value"]
        return str(erun.run_dir), out, False
    from lmmbench.sessions.perf.session import run_perf

    prun = run_perf(cfg)
    interrupted = prun.interrupted or any(r.interrupted for r in prun.results)
    return str(prun.run_dir), _perf_metrics([r.summary for r in prun.results]), interrupted


def _perf_metrics(summaries: list[PerfSummary]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, s in enumerate(summaries):
        prefix = "" if len(summaries) == 1 else f"p{i}."
        ttft, tpot = s.metrics["ttft_ms"], s.metrics["tpot_ms"]
        out.update({f"{prefix}requests": s.requests, f"{prefix}ok": s.ok, f"{prefix}errors": s.errors,
                    f"{prefix}qps": s.qps, f"{prefix}ttft_ms_mean": ttft.mean, f"{prefix}ttft_ms_p50": ttft.p50,
                    f"{prefix}ttft_ms_p99": ttft.p99, f"{prefix}tpot_ms_mean": tpot.mean})  # fmt: skip
        for name in ("server_ttft_ms", "client_minus_server_ttft_ms"):  # responses with server-side metrics
            if name in s.metrics:
                out[f"{prefix}{name}_p50"] = s.metrics[name].p50
    return out


def execute_job(job: Job) -> RowResult:
    """Run ``job`` in this process; an exception becomes a failed ``RowResult`` (never raised), a stop signal
    (Ctrl-C, the worker's SIGTERM) an ``interrupted`` one with what was measured."""
    t0, started = time.perf_counter_ns(), time.time()
    row_dir = Path(job.row_dir)
    row_dir.mkdir(parents=True, exist_ok=True)
    base = RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor, model=job.model)
    try:
        cfg = parse_model(config_model(job.kind, job.spec), {**job.config, "out_dir": str(row_dir)}, source="options")
        folder, metrics, cut = _run_metrics(job, cfg)
        base = base.model_copy(update={"status": "interrupted" if cut else "ok", "folder": folder,
                                       "metrics": metrics, "error": _stopped_line() if cut else None})
    except KeyboardInterrupt:  # a run that does not keep a partial result itself (eval resumes from its files)
        base = base.model_copy(update={"status": "interrupted", "error": _stopped_line()})
    except Exception as exc:  # a row that fails is a result, not a crash of the plan
        (row_dir / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
        base = base.model_copy(update={"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500]})
    return base.model_copy(update={"wall_s": (time.perf_counter_ns() - t0) / 1e9, "started_at_s": started,
                                   "ended_at_s": time.time(), "host": platform.node()})


def _stopped_line() -> str:
    from lmmbench.core.signals import stop_signal

    name = "SIGTERM" if stop_signal() == 15 else "SIGINT"
    return f"interrupted by {name}; what it measured is kept"


def write_result(result: RowResult, path: Path) -> None:
    """Write ``result`` as JSON (atomically: a reader never sees half a file); the row's folder is created when
    the row failed before its worker ever started (a venv that could not be built, a missing interpreter)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
