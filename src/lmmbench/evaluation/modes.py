"""`lmmbench eval`: the config, the backends, and AISBench's modes all / infer / eval.

A run lives in ``<out_dir>/<timestamp>/`` with ``logs/``, ``predictions/`` (one jsonl per task),
``results/`` (per-sample metrics and aggregates per task) and ``summary/``. ``--resume latest`` (or a
timestamp) reuses a run folder: `infer` skips samples already predicted, `eval` rescored them.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from lmmbench.backends.scoring import ScoringBackend
from lmmbench.core.clock import wall_label
from lmmbench.core.environment import capture_environment
from lmmbench.core.errors import UserError
from lmmbench.core.runs.log import Outcome, RunLog, load_run_log, measurement_from, new_run_id, write_run_log
from lmmbench.core.runs.summaries import eval_headline
from lmmbench.core.secrets import RedactingFilter
from lmmbench.evaluation.aggregate import write_summary
from lmmbench.evaluation.eval_config import EvalConfig
from lmmbench.evaluation.evaluate import TaskResult, evaluate_task
from lmmbench.evaluation.lmeval.groups import LmEvalGroup, group_results
from lmmbench.evaluation.runner import InferStats, run_infer
from lmmbench.evaluation.task_config import TaskConfig, group_columns
from lmmbench.evaluation.task_registry import resolve_selection

__all__ = ["EvalConfig", "EvalRun", "check_group_by_options", "make_backend", "run_eval", "truncation_totals"]

log = logging.getLogger(__name__)
runlog = logging.getLogger("lmmbench.evaluation.runlog")  # the run's own log file, never the console
runlog.propagate = False
runlog.setLevel(logging.INFO)


class EvalRun(BaseModel):
    """Where a run went and what it produced."""

    run_dir: Path
    infer: list[dict[str, Any]] = Field(default_factory=list)
    results: list[dict[str, Any]] = Field(default_factory=list)

    def sample_counts(self) -> tuple[int, int]:
        """(samples, failed samples): of the scored results when there are any, else of this infer pass."""
        if self.results:
            return sum(int(r["n_samples"]) for r in self.results), sum(int(r["n_errors"]) for r in self.results)
        return sum(int(s["done"]) for s in self.infer), sum(int(s["errors"]) for s in self.infer)

    @property
    def failed_everything(self) -> bool:
        """Every sample the run touched failed (nothing was measured)."""
        total, failed = self.sample_counts()
        return total > 0 and failed >= total

    def failure_reason(self) -> str | None:
        """The reason the failed samples of ``predictions/`` share (``core.exit_codes.failure_reason``)."""
        from lmmbench.core.exit_codes import failure_reason

        def errors() -> Any:
            for path in sorted((self.run_dir / "predictions").glob("*.jsonl")):
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    try:
                        yield json.loads(line).get("error")
                    except (ValueError, AttributeError):
                        continue

        return failure_reason(errors())


def _endpoint_identity(cfg: EvalConfig) -> tuple[str, int | None]:
    """(served model, context length) of the endpoint, once it answers; the length is --max-length, else
    the server's ``max_model_len``, else None (rolling perplexity then asks for --max-length)."""
    from lmmbench.backends.readiness import wait_for_server

    assert cfg.model is not None
    info = wait_for_server(cfg.model, cfg.served_model, cfg.wait_for_server)
    served = cfg.served_model or (info.models[0] if info.models else None)
    if served is None:
        raise UserError(f"{info.url}: cannot list the served models ({info.warning}); pass --served-model")
    return served, cfg.max_length or info.max_model_len.get(served)


def make_backend(cfg: EvalConfig) -> ScoringBackend:
    """The scoring backend for ``cfg.model``: an endpoint URL or an in-process model."""
    if cfg.model is None:
        raise UserError("--model is required for modes all and infer")
    if cfg.model.startswith(("http://", "https://")):
        from lmmbench.backends.scoring_openai import OpenAIScorer

        if cfg.tokenizer is None:
            raise UserError("--tokenizer <model name or dir> is required with an endpoint URL (token-level scoring)")
        from transformers import AutoTokenizer

        from lmmbench.models import resolve_model

        served, max_length = _endpoint_identity(cfg)
        tok = AutoTokenizer.from_pretrained(str(resolve_model(cfg.tokenizer).path))
        return OpenAIScorer(cfg.model, served, tok, max_length=max_length, concurrency=cfg.concurrency,
                            truncate=cfg.truncate)
    from lmmbench.backends.scoring import InProcessScorer
    from lmmbench.models import load_model
    from lmmbench.models.shapes import refuse_random_weights

    refuse_random_weights(cfg.model, cfg.allow_random_weights)
    if cfg.threads is not None:
        import torch

        torch.set_num_threads(cfg.threads)

    loaded = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    return InProcessScorer(loaded, batch_size=cfg.batch_size, max_length=cfg.max_length, pad_batches=cfg.pad_batches,
                           share_context=cfg.share_context, truncate=cfg.truncate)


def _random_weights(model: str | None) -> bool:
    """True for a shape-only model (run only with --allow-random-weights)."""
    from lmmbench.models.shapes import weights_provenance

    return bool(model) and not str(model).startswith(("http://", "https://")) and \
        weights_provenance(str(model)) is not None


def _run_dir(cfg: EvalConfig) -> Path:
    if cfg.resume is None:
        if cfg.mode == "eval":
            raise UserError("--mode eval scores an existing run: pass --resume latest or --resume <run folder>")
        stamp = _dt.datetime.now().strftime("%Y%m%d_%H%M%S")
        run = cfg.out_dir / stamp
        n = 1
        while run.exists():
            n += 1
            run = cfg.out_dir / f"{stamp}_{n}"
        return run
    if cfg.resume == "latest":
        runs = sorted(p for p in cfg.out_dir.glob("*") if _has_predictions(p))
        if not runs:
            raise UserError(f"{cfg.out_dir}: no earlier run with predictions to resume; run without --resume first")
        return runs[-1]
    run = cfg.out_dir / cfg.resume
    if not run.is_dir():
        raise UserError(f"{run}: no such run folder to resume")
    return run


def _has_predictions(run: Path) -> bool:
    """A run folder worth resuming: at least one non-empty predictions file (a run that failed before
    predicting anything is never picked by ``--resume latest``)."""
    pred = run / "predictions"
    return pred.is_dir() and any(p.stat().st_size > 0 for p in pred.glob("*.jsonl"))


def check_group_by_options(cfg: EvalConfig) -> None:
    """Refuse, without running anything, a ``group_by`` column that none of lmmbench's own tasks' samples has
    or that is named twice (a plan's eval row, checked when the plan is validated). Names lmmbench does not
    know (lm-eval's catalogue, lmms-eval's) are checked where they run."""
    if not cfg.group_by:
        return
    own = []
    for name in cfg.tasks:
        try:
            resolve_selection([name], cfg.include_path)
            own.append(name)
        except UserError:
            continue
    from lmmbench.evaluation.runner import check_group_by

    for task in _tasks(cfg, own)[0]:
        check_group_by(task)


def _split_catalogue(cfg: EvalConfig) -> tuple[list[str], list[str]]:
    """``--tasks`` as (lmmbench's own, lm-eval catalogue names): a name lmmbench does not know goes to lm-eval's
    catalogue when lm-eval is installed and knows it."""
    from lmmbench.evaluation.lmeval.catalogue import INSTALL, catalogue_available, catalogue_knows

    for folder in cfg.include_path:  # before lm-eval's catalogue is asked (it takes seconds to index)
        if not Path(folder).is_dir():
            raise UserError(f"--include-path: {folder} is not a folder")
    ours, catalogue = [], []
    for name in cfg.tasks:
        try:
            resolve_selection([name], cfg.include_path)
            ours.append(name)
        except UserError as exc:
            if Path(name).suffix.lower() in (".yaml", ".yml") or Path(name).is_file():  # a file, not a catalogue name:
                raise  # its own error at once (lm-eval's catalogue takes seconds to index)
            if catalogue_knows(name, cfg.include_path):
                catalogue.append(name)
            elif not catalogue_available() and not Path(name).suffix:
                raise UserError(f"{exc}; lm-evaluation-harness's catalogue (arc_easy, hellaswag, mmlu, gsm8k, ...) "
                                f"needs {INSTALL}") from None
            else:
                raise
    if catalogue and cfg.mode != "all":
        raise UserError(f"--mode {cfg.mode}: lm-eval catalogue tasks ({', '.join(catalogue)}) run in mode all")
    if catalogue:  # before lm-eval builds its tasks (seconds) and before the model loads
        from lmmbench.evaluation.lmeval.data_check import check_catalogue_data

        check_catalogue_data(catalogue, cfg.include_path)
    return ours, catalogue


def _tasks(cfg: EvalConfig, names: list[str]) -> tuple[list[TaskConfig], list[LmEvalGroup]]:
    if not cfg.tasks:
        raise UserError("--tasks: give at least one task name or YAML file (see `lmmbench tasks`)")
    if names and cfg.limit is not None and cfg.limit < 1:
        raise UserError(f"--limit {cfg.limit:g}: a fraction applies to lm-eval catalogue tasks; give lmmbench's "
                        f"own tasks ({', '.join(names)}) a whole number")
    out = []
    selection = resolve_selection(names, cfg.include_path) if names else None
    if selection is None:
        return [], []
    for task in selection.tasks:
        updates: dict[str, Any] = {}
        if cfg.limit is not None:
            updates["data"] = task.data.model_copy(update={"limit": int(cfg.limit)})
        if cfg.num_fewshot is not None:
            updates["fewshot"] = task.fewshot.model_copy(update={"num": cfg.num_fewshot})
        if cfg.group_by:
            group_columns(cfg.group_by)  # a malformed joint grouping ('a+') is refused before the model loads
            twice = next((g for i, g in enumerate(cfg.group_by) if g in cfg.group_by[:i]), None)
            if twice is not None:
                raise UserError(f"--group-by: '{twice}' is given twice")
            updates["group_by"] = list(dict.fromkeys([*task.group_by, *cfg.group_by]))
        out.append(task.model_copy(update=updates))
    return out, selection.groups


def _with_options(cfg: EvalConfig, tasks: list[TaskConfig], catalogue: list[str], lmms: list[str]) -> list[TaskConfig]:
    """``tasks`` with the run's generation and prompt options applied; an option no task can act on is refused
    (evaluation.eval_options)."""
    from lmmbench.evaluation.eval_options import GenSettings, apply_to_task, check_options

    kinds: list[str | None] = []
    if catalogue:
        from lmmbench.evaluation.lmeval.catalogue import catalogue_output_types

        kinds = catalogue_output_types(catalogue, cfg.include_path)
    check_options(cfg, tasks, kinds, lmms)
    gen = GenSettings.from_config(cfg)
    tasks = [apply_to_task(t, cfg, gen) for t in tasks]
    if cfg.prompt is not None:  # a registered prompt for every task of this run (eval --prompt, a plan row)
        from lmmbench.evaluation.task_config import with_prompt

        tasks = [with_prompt(t, cfg.prompt, Path.cwd()) for t in tasks]
    return tasks


def _infer_all(cfg: EvalConfig, tasks: list[Any], lmms: list[str], backend: Any, run: EvalRun,
               show_progress: bool) -> None:  # fmt: skip
    """Answer every task's samples (lmmbench's tasks, then lmms-eval's benchmarks) into the run's predictions."""
    for task in tasks:
        stats = _infer_one(task, backend, run.run_dir, show_progress)
        runlog.info("infer %s: %s", task.task, stats)
        run.infer.append(stats.__dict__)
    if lmms:
        from lmmbench.evaluation.eval_options import GenSettings
        from lmmbench.evaluation.lmms.run import run_lmms_infer

        gen = GenSettings.from_config(cfg)
        for lstats in run_lmms_infer(lmms, backend, run.run_dir, cfg.limit, gen, show_progress):
            runlog.info("infer %s: %s", lstats.task, lstats)
            run.infer.append(lstats.__dict__)


def _evaluate_all(cfg: EvalConfig, tasks: list[Any], groups: Any, lmms: list[str], catalogue: list[str],
                  backend: Any, run_dir: Path) -> list[TaskResult]:  # fmt: skip
    """Score the predictions of every task and group; lm-eval catalogue tasks run (and score) through lm-eval."""
    results: list[TaskResult] = []
    for task in tasks:
        pred = run_dir / "predictions" / f"{task.task}.jsonl"
        results.append(evaluate_task(task, pred, run_dir / "results"))
    results += group_results(groups, results, run_dir / "results")  # lm-eval group files
    if lmms:
        from lmmbench.evaluation.lmms.run import run_lmms_eval

        results += run_lmms_eval(lmms, run_dir, cfg.limit)
    if catalogue and backend is not None:  # lm-eval's own task objects, answered by lmmbench's backend
        from lmmbench.core.quiet import stderr_to_file
        from lmmbench.evaluation.lmeval.catalogue import run_catalogue

        with stderr_to_file(run_dir / "logs" / "lm-eval.log"):  # lm-eval's bars, warnings, git's "fatal:"
            results += run_catalogue(cfg, catalogue, backend, run_dir)
    return results


def run_eval(cfg: EvalConfig, show_progress: bool = True) -> EvalRun:
    """Run ``cfg.mode`` on every task; returns the run folder and what was done."""
    from lmmbench.config.input_files import prepare_out_dir

    if not cfg.tasks:
        raise UserError("--tasks: give at least one task name or YAML file (see `lmmbench tasks`)")
    if cfg.mode == "perf":
        raise UserError("--mode perf is a load test: `lmmbench eval --mode perf` (sessions.eval.perf) runs it")
    if cfg.models:
        raise UserError("--models runs one eval per model: `lmmbench eval --models` (sessions.eval.models) runs them")
    from lmmbench.evaluation.lmms import is_lmms_task  # lmms-eval's multimodal benchmarks by name

    lmms = [n for n in cfg.tasks if is_lmms_task(n)]
    own, catalogue = _split_catalogue(cfg.model_copy(update={"tasks": [n for n in cfg.tasks if n not in lmms]}))
    tasks, groups = _tasks(cfg, own)
    tasks = _with_options(cfg, tasks, catalogue, lmms)
    from lmmbench.evaluation.runner import check_first_prompt, check_group_by

    for task in tasks:  # a --group-by column no sample has is refused before anything loads
        check_group_by(task)
    if cfg.mode in ("all", "infer"):  # a broken template is found before the model loads, not after
        for task in tasks:
            check_first_prompt(task)
    run_dir = _run_dir(cfg)
    prepare_out_dir(cfg.out_dir)
    backend = make_backend(cfg) if cfg.mode in ("all", "infer") else None  # a wrong model fails before the run folder
    for sub in ("logs", "predictions", "results", "summary"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    log_names = dict.fromkeys((f"{cfg.mode}.log", "all.log"))  # mode all: one file
    handlers = [logging.FileHandler(run_dir / "logs" / name, encoding="utf-8") for name in log_names]
    root = logging.getLogger("lmmbench")
    for handler in handlers:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(RedactingFilter())
        root.addHandler(handler)  # warnings of the run go to its log files too
        runlog.addHandler(handler)
    try:
        env = capture_environment()
        (run_dir / "logs" / f"config_{cfg.mode}.json").write_text(
            json.dumps({"config": cfg.model_dump(mode="json"), "environment": env,
                        "random_weights": _random_weights(cfg.model)}, indent=2) + "\n"
        )
        run = EvalRun(run_dir=run_dir)
        run_log = _start_run_log(cfg, run_dir, env, [t.prompt_record for t in tasks if t.prompt_record])
        if backend is not None:
            _infer_all(cfg, tasks, lmms, backend, run, show_progress)
        if cfg.mode in ("all", "eval"):
            results = _evaluate_all(cfg, tasks, groups, lmms, catalogue, backend, run_dir)
            _log_truncation(results)
            write_summary(results, run_dir / "summary", title=f"lmmbench eval — {run_dir.name}")
            run.results = [r.to_json() for r in results]
        _finish_run_log(run_log, run, run_dir)
        return run
    except BaseException as exc:
        runlog.error("run failed: %s: %s", type(exc).__name__, exc)  # the fatal error, in logs/all.log too
        if not _has_predictions(run_dir):  # nothing measured: no run log that looks like a run
            (run_dir / "run.json").unlink(missing_ok=True)
        raise
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            runlog.removeHandler(handler)
            handler.close()


def _start_run_log(cfg: EvalConfig, run_dir: Path, env: dict[str, Any], prompts: list[dict[str, str]]) -> RunLog:
    """run.json of an eval run, written at its start (a resumed run keeps its id); the registered prompts it
    asked with (name, version, sha256) are part of its config."""
    previous = run_dir / "run.json"
    run_id = new_run_id("eval")
    if previous.is_file():
        with contextlib.suppress(Exception):
            run_id = load_run_log(previous).run_id
    config = cfg.model_dump(mode="json")
    if prompts:
        config["prompts"] = list({p["ref"]: p for p in prompts}.values())
    run_log = RunLog(run_id=run_id, kind="eval", name=run_dir.name, model=cfg.model, started_at=wall_label(),
                     config=config, environment=env, run={"mode": cfg.mode},
                     measurement=measurement_from({"timer": "perf_counter_ns",
                                                    "random_weights": _random_weights(cfg.model)}, config))  # fmt: skip
    write_run_log(run_dir, run_log)
    return run_log


def _log_truncation(results: list[TaskResult]) -> None:
    """A warning in the run's log per task whose contexts were cut to the model's window."""
    for r in results:
        counts = r.truncated or {}
        if any(counts.values()):
            runlog.warning("%s: left-truncated to the model's window (lm-eval's rule; --no-truncate refuses): %s",
                           r.task, ", ".join(f"{v} {k}" for k, v in counts.items()))  # fmt: skip


def truncation_totals(results: list[dict[str, Any]]) -> dict[str, int | None]:
    """Truncated requests of a run by lm-eval request kind, over its tasks (None when a task's count is unknown)."""
    tasks = [r for r in results if r.get("kind") != "group"]
    out: dict[str, int | None] = {}
    for kind in ("generate_until", "loglikelihood"):
        values = [(r.get("truncated") or {}).get(kind) if r.get("truncated") is not None else None for r in tasks]
        out[kind] = None if any(v is None for v in values) else sum(int(v) for v in values if v is not None)
    return out


def _finish_run_log(run_log: RunLog, run: EvalRun, run_dir: Path) -> None:
    """run.json at the end: counts, failures, accuracy headline, files; indexed in the run store."""
    errors = sum(int(s.get("errors") or 0) for s in run.infer)
    scored = sum(int(r.get("n_samples") or 0) for r in run.results)
    failed = sum(int(r.get("n_errors") or 0) for r in run.results)
    done = sum(int(s.get("done") or 0) for s in run.infer)
    run_log.outcome = Outcome.model_validate({"ok": scored if run.results else done,
                                              "failed": failed if run.results else errors,
                                              "failures_by_kind": {"inference": errors} if errors else {}})
    run_log.headline = eval_headline(run.results)
    if run.results:
        run_log.measurement = run_log.measurement.model_copy(update={
            "truncated_requests": truncation_totals(run.results)})  # fmt: skip
    run_log.run["infer"] = run.infer
    if run.results:  # in the workload fingerprint (core.runs.fingerprint): a task's new version is another workload
        tasks = [r for r in run.results if r.get("kind") != "group"]
        run_log.run["task_versions"] = {str(r["task"]): r.get("version") for r in tasks}
    run_log.finished_at = wall_label()
    write_run_log(run_dir, run_log, index=False)
    from lmmbench.reports.html_report import write_reports

    write_reports("eval", run_dir)  # report.html; a failure is a logged warning
    run_log.files = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())
    write_run_log(run_dir, run_log)


def _infer_one(task: TaskConfig, backend: ScoringBackend, run_dir: Path, show_progress: bool) -> InferStats:
    pred = run_dir / "predictions" / f"{task.task}.jsonl"
    if not show_progress:
        return run_infer(task, backend, pred)
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        tid = bar.add_task(f"{task.task}", total=None)
        return run_infer(
            task,
            backend,
            pred,
            progress=lambda n: bar.advance(tid, n),
            on_total=lambda n: bar.update(tid, total=n),
        )
