"""Evaluation tasks under load, after each load point: the answers written as AISBench writes them
(``predictions/<task>.jsonl``), and with ``--score`` each answer scored with its task's own metric, so the point
reports its accuracy over every request sent (correct / sent: a failed request counts as not correct; 95 % Wilson
interval over the distinct documents sent; the accuracy over the answered requests and the failures beside it),
correct goodput (requests that met every SLO AND were answered correctly, per second) and McNemar's exact test
against the first point
(``results/quality.json``, ``summary/quality.csv``, columns of ``summary.csv``, ``report.json``'s ``quality``,
``quality_vs_load.png``).

A request counts as correct when its task's primary (first) metric equals 1 (exact_match, acc); a task whose
primary metric is continuous (f1, anls, bleu ...) needs ``--correct-if METRIC>=X``.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.config.perf.tasks import parse_correct_if
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import RequestRecord
from lmmbench.evaluation.task_config import TaskConfig
from lmmbench.loadgen.api import LoadResult
from lmmbench.metrics.perf_metrics import meets_slo, request_values
from lmmbench.metrics.quality import Answer, point_quality
from lmmbench.sessions.perf.tasks import TaskDoc, TaskWorkload

__all__ = ["BINARY_METRICS", "TaskQuality", "accuracy_samples", "prepare_task_run"]

#: metrics whose per-request value is 0 or 1: a request is correct when it equals 1
BINARY_METRICS = frozenset({"exact_match", "acc", "acc_norm"})


def prepare_task_run(cfg: PerfConfig, eval_cfg: Any = None) -> tuple[PerfConfig, list[Any], TaskQuality]:
    """``cfg`` with the tasks' requests as its workload (one pass per point unless --num-requests or
    --duration-s say otherwise; answers kept), the requests, and the quality bookkeeping of the run.
    ``eval_cfg``: the ``EvalConfig`` of ``eval --mode perf`` (else built from ``cfg``)."""
    from lmmbench.evaluation.eval_config import EvalConfig
    from lmmbench.sessions.perf.tasks import DATASET_FIELDS, build_task_workload

    given = sorted(f for f in DATASET_FIELDS if f in cfg.model_fields_set)
    if given:
        raise UserError(f"--tasks: the tasks decide prompts and generation settings; drop "
                        f"{', '.join('--' + f.replace('_', '-') for f in given)}")
    if "keep_text" in cfg.model_fields_set and not cfg.keep_text:
        raise UserError("--no-keep-text with --tasks: the answers are kept (predictions/<task>.jsonl); drop it")
    if cfg.resume and cfg.score:
        raise UserError("--resume with --score: McNemar's test needs the first point's answers of this run; "
                        "run the points again in a fresh --run-name")
    if cfg.action != "run":
        raise UserError(f"perf {cfg.action} with --tasks: not supported; run `perf --tasks ...` at given loads")
    if eval_cfg is None:
        options = {f: getattr(cfg, f) for f in cfg.EVAL_OPTIONS if f in cfg.model_fields_set}
        if "seed" in cfg.model_fields_set:  # perf's --seed seeds the few-shot draw as eval's --seed N does
            options["seed"] = str(cfg.seed)
        eval_cfg = EvalConfig.model_validate({
            "model": cfg.url, "tasks": cfg.tasks, "served_model": cfg.model, "limit": cfg.task_limit,
            "tokenizer": str(cfg.tokenizer) if cfg.tokenizer is not None else None, **options})  # fmt: skip
    workload = build_task_workload(eval_cfg, cfg.model or "endpoint")
    quality = TaskQuality(workload, cfg)
    update: dict[str, Any] = {"keep_text": True}
    if cfg.num_requests is None and cfg.duration_s is None:
        update["num_requests"] = len(workload.requests)
    return cfg.model_copy(update=update), workload.requests, quality


class TaskQuality:
    """The tasks of a perf run: checks before the run, answers and accuracy after each point."""

    def __init__(self, workload: TaskWorkload, cfg: PerfConfig) -> None:
        self.workload, self.cfg = workload, cfg
        self.rule = parse_correct_if(cfg.correct_if) if cfg.correct_if else None
        self.metrics: dict[str, tuple[Any, Any]] = {}  # task -> (spec, metric) that decides correctness
        self.first: list[Answer] | None = None
        self.points: list[dict[str, Any]] = []
        if cfg.score:
            unscored = sorted({d.task for d in workload.docs} - set(workload.tasks))
            if unscored:
                raise UserError(f"--score: {', '.join(unscored)} (lm-eval catalogue / lmms-eval) are scored by their "
                                "own harness over a whole run, not per answer; drop --score or give lmmbench tasks")
            for name, task in workload.tasks.items():
                self.metrics[name] = self._metric(task)
        elif cfg.correct_if:
            raise UserError("--correct-if decides which answers are correct: it needs --score")

    def _metric(self, task: TaskConfig) -> tuple[Any, Any]:
        from lmmbench.evaluation.evaluate import _metric_entries

        if task.kind != "generate":
            raise UserError(f"--score: task '{task.task}' ({task.kind}) is answered with log-probs, scored by "
                            "`lmmbench eval` only; drop --score or give generation tasks")
        entries = _metric_entries(task)
        if self.rule is not None:
            for spec, metric in entries:
                if spec.name == self.rule[0]:
                    top = getattr(metric, "top", None)
                    if top is not None and self.rule[1] > top:
                        raise UserError(f"--correct-if {self.cfg.correct_if}: no answer can reach it ({spec.name} "
                                        f"scores at most {top:g}); give a threshold within 0..{top:g}")  # fmt: skip
                    return spec, metric
            raise UserError(f"--correct-if {self.cfg.correct_if}: task '{task.task}' has no metric "
                            f"'{self.rule[0]}' (it has {', '.join(s.name for s, _ in entries)})")
        spec, metric = entries[0]
        if spec.name.partition(",")[0] not in BINARY_METRICS:
            raise UserError(f"--score: task '{task.task}''s primary metric '{spec.name}' is continuous: say what "
                            f"counts as correct with --correct-if {spec.name}>=X")
        return spec, metric

    def _correct(self, doc: TaskDoc, text: str) -> tuple[bool, float]:
        from lmmbench.evaluation.evaluate import _filtered, extract_answer

        task = self.workload.tasks[doc.task]
        spec, metric = self.metrics[doc.task]
        sample = {**doc.row, "output": text, "prediction": extract_answer(task, text)}
        value = float(metric.score(_filtered(task, sample, spec.name), spec.options))
        if self.rule is not None:
            return value >= self.rule[1], value
        return value == 1.0, value

    def labels(self) -> dict[str, Any]:
        """Labels of every point: the tasks (the data set's synthetic lengths do not apply)."""
        return {"tasks": ",".join(self.workload.tasks), "input_tokens": None, "output_tokens": None}

    def before_point(self, url: str, model: str) -> None:
        """Before the first point: an endpoint that cannot answer the log-likelihood requests is refused."""
        body, self.workload.loglikelihood_body = self.workload.loglikelihood_body, None
        if body is not None:
            from lmmbench.sessions.perf.tasks import probe_loglikelihood

            probe_loglikelihood(url, model, body, self.cfg.api_key, self.cfg.timeout_s)

    def point_done(self, i: int, labels: dict[str, Any], res: LoadResult, out: Any) -> None:
        """Write point ``i``'s answers; with --score its accuracy into summary.csv's row and report.json."""
        run_dir: Path = out.run_dir
        n = len(self.workload.requests)
        answers: list[Answer] = []
        per_task: dict[str, list[Answer]] = {}
        for sub in ("logs", "predictions", "results", "summary"):
            (run_dir / sub).mkdir(exist_ok=True)
        handles: dict[str, Any] = {}
        try:
            for rec in res.records:
                if rec.warmup:
                    continue
                doc = self.workload.docs[rec.request_id % n]
                row = self._prediction(i, rec, doc, rec.request_id // n)
                if doc.task not in handles:
                    handles[doc.task] = (run_dir / "predictions" / f"{doc.task}.jsonl").open("a", encoding="utf-8")
                handles[doc.task].write(json.dumps(row, ensure_ascii=False) + "\n")
                if "correct" in row:  # every request sent with --score: a failed one counts, as not correct
                    met = meets_slo(request_values(rec), self.cfg.slo) if self.cfg.slo else rec.ok
                    a = Answer((doc.task, doc.doc_id), row["pass"], bool(row["correct"]), met, rec.ok)
                    answers.append(a)
                    per_task.setdefault(doc.task, []).append(a)
        finally:
            for fh in handles.values():
                fh.close()
        if self.cfg.score:
            self._report(i, labels, res, answers, per_task, out)
        shutil.copyfile(run_dir / "summary.csv", run_dir / "summary" / "summary.csv")  # AISBench's summary/

    def _prediction(self, i: int, rec: RequestRecord, doc: TaskDoc, pass_no: int) -> dict[str, Any]:
        row: dict[str, Any] = {"point": i, "pass": pass_no, "request_id": rec.request_id, "task": doc.task,
                               "doc_id": doc.doc_id, "part": doc.part, "output": rec.output_text if rec.ok else None,
                               "error": None if rec.ok else f"{rec.error_kind}: {rec.error_message}"[:300]}  # fmt: skip
        if self.cfg.score and doc.kind == "generate":
            row["correct"] = False  # a request that failed, or whose answer cannot be scored, was not answered right
            if rec.ok:
                try:
                    row["correct"], row["metric_value"] = self._correct(doc, rec.output_text)
                except (ValueError, KeyError, TypeError, IndexError) as exc:
                    row["error"] = f"scoring failed: {type(exc).__name__}: {exc}"
        return row

    def _report(self, i: int, labels: dict[str, Any], res: LoadResult, answers: list[Answer],
                per_task: dict[str, list[Answer]], out: Any) -> None:  # fmt: skip
        duration = res.summary.duration_s if math.isfinite(res.summary.duration_s) else None
        q = point_quality(answers, duration, self.first)
        if self.first is None:
            self.first = answers
        tasks = {t: point_quality(a, duration).__dict__ for t, a in sorted(per_task.items())}
        entry = {"point": i, "rate": labels.get("rate"), "concurrency": labels.get("concurrency"),
                 "ttft_ms_p50": res.summary.metrics["ttft_ms"].p50, **q.__dict__, "tasks": tasks}  # fmt: skip
        self.points.append(entry)
        out.rows[-1].update(q.row())
        out.extra["quality"] = self.points
        out.flush()
        run_dir: Path = out.run_dir
        (run_dir / "results" / "quality.json").write_text(json.dumps(self.points, indent=2, default=str) + "\n")
        self._summary_csv(run_dir / "summary" / "quality.csv")
        if q.failures:
            print(f"[perf] accuracy at point {i}: {q.correct} correct of {q.sent} sent = {q.accuracy:.3f} "
                  f"({q.failures} failed, counted as not correct; over the {q.answered} answered: "
                  f"{_fmt(q.accuracy_over_answered)})", file=sys.stderr)
        if q.changed:
            print(f"[perf] accuracy at point {i} ({q.accuracy:.3f}) differs from the first point's "
                  f"(McNemar exact p = {q.mcnemar_p:.3g}, {q.mcnemar_b} answers lost, {q.mcnemar_c} gained)",
                  file=sys.stderr)
        if self.cfg.plots and len(self.points) > 1:
            _chart(run_dir / "quality_vs_load.png", self.points)

    def _summary_csv(self, path: Path) -> None:
        cols = ["point", "rate", "concurrency", "task", "accuracy", "ci_low", "ci_high", "correct", "sent", "docs",
                "answered", "failures", "accuracy_over_answered", "correct_goodput_qps", "mcnemar_p", "changed",
                "ttft_ms_p50"]  # fmt: skip
        with path.open("w", encoding="utf-8", newline="") as fh:
            w = csv.DictWriter(fh, cols, extrasaction="ignore")
            w.writeheader()
            for p in self.points:
                w.writerow({**p, "task": "all"})
                for t, tq in p["tasks"].items():
                    w.writerow({"point": p["point"], "rate": p["rate"], "concurrency": p["concurrency"], "task": t,
                                **tq})


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _chart(path: Path, points: list[dict[str, Any]]) -> None:
    """Accuracy (with its interval) and TTFT p50 against load, one chart, two axes."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    xs = [float(p["rate"] if p["rate"] is not None else p["concurrency"] or 0) for p in points]
    acc = [p["accuracy"] if p["accuracy"] is not None else math.nan for p in points]
    lo = [a - (p["ci_low"] if p["ci_low"] is not None else a) for a, p in zip(acc, points, strict=True)]
    hi = [(p["ci_high"] if p["ci_high"] is not None else a) - a for a, p in zip(acc, points, strict=True)]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.errorbar(xs, acc, yerr=[lo, hi], marker="o", color="tab:blue", capsize=3, label="accuracy (95 % CI)")
    ax.set_xlabel("rate (req/s)" if points[0]["rate"] is not None else "concurrency")
    ax.set_ylabel("accuracy", color="tab:blue")
    ax.set_ylim(0, 1.05)
    ax2 = ax.twinx()
    ax2.plot(xs, [p["ttft_ms_p50"] for p in points], marker="s", color="tab:red", label="TTFT p50")
    ax2.set_ylabel("TTFT p50 (ms)", color="tab:red")
    ax.set_title("Accuracy and TTFT against load")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def accuracy_samples(run_dir: Path) -> list[tuple[int, float]]:
    """(point, 1.0 / 0.0) per scored answer in ``run_dir/predictions`` (`runs compare` reads them per point)."""
    out: list[tuple[int, float]] = []
    for path in sorted((run_dir / "predictions").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("correct"), bool) and isinstance(row.get("point"), int):
                out.append((row["point"], 1.0 if row["correct"] else 0.0))
    return out
