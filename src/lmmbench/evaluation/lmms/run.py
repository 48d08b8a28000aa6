"""Running an lmms-eval benchmark: infer (one chat request per sample) and eval (lmms-eval's checks).

Every sample is one user turn: its media (images, an audio clip, or video frames), then the prompt text
(lmms-eval's default message layout), greedy, ``max_new_tokens`` as lmms-eval's task file sets it.
Predictions go to ``predictions/<task>.jsonl`` as they return (a rerun skips samples already answered);
``results/<task>.json`` and ``results/<task>_metrics.csv`` hold the scores, overall and per category.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lmmbench.backends.scoring import GenRequest, ScoringBackend
from lmmbench.evaluation.eval_options import GenSettings, request_seed
from lmmbench.evaluation.evaluate import TaskResult
from lmmbench.evaluation.lmms.av_tasks import VIDEO_FRAMES
from lmmbench.evaluation.lmms.media import audio_file, image_file, load_rows, video_frame_files
from lmmbench.evaluation.lmms.spec import LmmsTask, Scored
from lmmbench.evaluation.runner import InferStats, read_predictions, repair_predictions, server_metrics_of
from lmmbench.metrics.accuracy import MetricValue, mean_stderr

__all__ = ["evaluate_lmms", "infer_lmms", "run_lmms_eval", "run_lmms_infer"]

log = logging.getLogger(__name__)


def _docs(task: LmmsTask, limit: float | None) -> Sequence[dict[str, Any]]:
    """The task's rows (read on access); ``limit``: the first N, or a fraction below 1 (rounded up, as lm-eval)."""
    rows = load_rows(task.name, task.dataset, task.config, task.split)
    if limit is None:
        return rows
    return rows.head(math.ceil(len(rows) * limit) if limit < 1 else int(limit))


def media_files(task: LmmsTask, doc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(image files, audio files) of one sample."""
    items = task.media(doc)
    if task.kind == "audio":
        return [], [str(audio_file(a)) for a in items]
    if task.kind == "video":
        return [str(p) for v in items for p in video_frame_files(Path(v), VIDEO_FRAMES)], []
    return [str(image_file(i)) for i in items], []


def _request(task: LmmsTask, doc: dict[str, Any], doc_id: int, gen: GenSettings) -> GenRequest:
    """One chat request: the sample's media and prompt (lmms-eval's layout) with the run's generation settings
    (``--gen_kwargs``, ``--system_instruction`` as a system turn, ``--seed``)."""
    images, audio = media_files(task, doc)
    layout = task.layout(doc) if task.layout is not None else None
    prompt = task.prompt(doc)
    messages = [{"role": "system", "content": gen.system}, {"role": "user", "content": prompt}] if gen.system else None
    temperature = gen.temperature or 0.0
    return GenRequest(prompt, gen.max_tokens or task.max_new_tokens, list(gen.stop or []), images, audio, chat=True,
                      layout=layout, messages=messages, temperature=temperature, top_p=gen.top_p or 1.0,
                      top_k=gen.top_k or 0, seed=request_seed(gen.seed, doc_id) if temperature > 0 else None)


def _pending(task: LmmsTask, backend: ScoringBackend, docs: Sequence[dict[str, Any]], ids: Sequence[int],
             gen: GenSettings, existing: dict[str, dict[str, Any]]) -> list[tuple[int, str, dict[str, Any], Any]]:
    """(doc id, key, meta, request or the error that stops it) of the samples in ``ids`` not yet answered."""
    out = []
    for doc_id in ids:
        doc = docs[doc_id]
        try:
            req: GenRequest | BaseException = _request(task, doc, doc_id, gen)
        except (ValueError, OSError, KeyError) as exc:  # a broken image or a missing video fails its sample
            req = exc
        payload = [req.prompt, [Path(p).name for p in req.images], [Path(p).name for p in req.audio], req.max_tokens,
                   req.layout] if isinstance(req, GenRequest) else [doc_id, str(req)]  # fmt: skip
        if isinstance(req, GenRequest) and (req.stop or req.messages or req.temperature > 0):
            payload += [req.stop, req.messages, req.temperature, req.top_p, req.top_k, req.seed]
        blob = json.dumps([backend.model_id, task.name, task.version, payload], sort_keys=True, default=str)
        key = hashlib.sha256(blob.encode()).hexdigest()[:24]
        if key not in existing or existing[key].get("error"):
            out.append((doc_id, key, _meta(task, doc), req))
    return out


def infer_lmms(
    task: LmmsTask,
    backend: ScoringBackend,
    pred_path: Path,
    limit: float | None = None,
    gen: GenSettings | None = None,
    progress: Callable[[int], None] | None = None,
    chunk_size: int = 32,
) -> InferStats:
    """Answer every pending sample of ``task`` and append the predictions to ``pred_path``.

    Samples go chunk by chunk (media files written, requests sent, predictions appended), so memory holds one
    chunk's media and a killed run keeps every finished chunk."""
    t0 = time.perf_counter_ns()
    docs = _docs(task, limit)
    gen = gen or GenSettings()
    repair_predictions(pred_path)
    existing = read_predictions(pred_path)
    pred_path.parent.mkdir(parents=True, exist_ok=True)
    errors = done = 0
    with pred_path.open("a", encoding="utf-8") as fh:
        for start in range(0, len(docs), chunk_size):
            ids = range(start, min(start + chunk_size, len(docs)))
            chunk = _pending(task, backend, docs, ids, gen, existing)
            reqs = [r for *_, r in chunk if isinstance(r, GenRequest)]
            answers = iter(backend.generate(reqs) if reqs else [])
            served = iter(server_metrics_of(backend, len(reqs)))  # an endpoint's own timings of each answer
            for doc_id, key, meta, req in chunk:
                out: Any = next(answers) if isinstance(req, GenRequest) else req
                server = next(served) if isinstance(req, GenRequest) else None
                row: dict[str, Any] = {"task": task.name, "task_version": task.version, "doc_id": doc_id,
                                       "kind": "generate", "model": backend.model_id, "key": key, "meta": meta}
                if isinstance(req, GenRequest):
                    row.update(prompt=req.prompt, images=[Path(p).name for p in req.images],
                               audio=[Path(p).name for p in req.audio])  # fmt: skip
                if isinstance(out, BaseException):
                    row.update(output=None, error=f"{type(out).__name__}: {out}")
                    errors += 1
                else:
                    row.update(output=str(out), error=None)
                    if server is not None:
                        row["server_metrics"] = server
                fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                fh.flush()
            done += len(chunk)
            if progress is not None:
                progress(len(ids))
    wall_s = (time.perf_counter_ns() - t0) / 1e9
    return InferStats(task.name, len(docs), len(docs) - done, done, errors, wall_s)


def _meta(task: LmmsTask, doc: dict[str, Any]) -> dict[str, Any]:
    try:
        return task.meta(doc)
    except (KeyError, ValueError) as exc:
        return {"meta_error": str(exc)}


def _values(task: LmmsTask, samples: Sequence[Scored]) -> dict[str, MetricValue]:
    try:
        agg = task.aggregate(samples) if samples else {}
    except ValueError as exc:  # e.g. MME cut by --limit in the middle of an image's question pair
        log.warning("%s: no aggregate (%s)", task.name, exc)
        agg = {}
    out = {}
    for name in task.metrics:
        if name not in agg:
            continue
        per = [float(s[name]) for s in samples if name in s]
        stderr = mean_stderr(per) if name in task.mean_metrics else None
        if name in task.mean_metrics:
            n = len(per)
        else:  # the samples this aggregate is over
            n = sum(1 for s in samples if task.metric_of is None or task.metric_of(s) == name)
        extra = {"lower_is_better": name in task.lower_is_better, **task.notes()}
        out[name] = MetricValue(name, float(agg[name]), stderr, n, extra)
    return out


def evaluate_lmms(task: LmmsTask, pred_path: Path, results_dir: Path, limit: float | None = None) -> TaskResult:
    """Score the predictions of ``task`` with lmms-eval's checks; write per-sample and aggregate results."""
    from lmmbench.core.errors import UserError

    by_doc: dict[int, dict[str, Any]] = {}
    for r in read_predictions(pred_path).values():  # the last prediction of a sample wins
        by_doc[int(r["doc_id"])] = r
    if not by_doc:
        raise UserError(f"{pred_path}: no predictions for task '{task.name}'; run with --mode infer or all first")
    docs = _docs(task, limit)
    rows = [by_doc[k] for k in sorted(by_doc) if k < len(docs)]
    results_dir.mkdir(parents=True, exist_ok=True)
    scored: list[Scored] = []
    metas: list[dict[str, Any]] = []
    n_errors = 0
    with (results_dir / f"{task.name}_metrics.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["doc_id", *task.categories, *task.metrics, "parsed", "sample", "prediction", "error"])
        for r in rows:
            doc = docs[int(r["doc_id"])]
            meta = _meta(task, doc)
            err = r.get("error")
            s: Scored = {}
            if not err:
                try:
                    s = task.score(doc, str(r.get("output") or "").strip())
                except (ValueError, KeyError, TypeError, IndexError) as exc:
                    err = f"scoring failed: {type(exc).__name__}: {exc}"
            cats = [meta.get(c) for c in task.categories]
            if err:
                n_errors += 1
                writer.writerow([r["doc_id"], *cats, *([""] * len(task.metrics)), "", "", "", err])
                continue
            scored.append(s)
            metas.append(meta)
            parsed = json.dumps(s.get("parsed"), default=str)
            sample = json.dumps({k: v for k, v in s.items() if k != "parsed"}, default=str)  # the per-sample check
            writer.writerow([r["doc_id"], *cats, *(s.get(m, "") for m in task.metrics), parsed, sample,
                             r.get("output"), ""])  # fmt: skip
    groups: dict[str, dict[str, dict[str, MetricValue]]] = {}
    for col in task.categories:
        members: dict[str, list[Scored]] = {}
        for s, meta in zip(scored, metas, strict=True):
            members.setdefault(str(meta.get(col)), []).append(s)
        groups[col] = {g: _values(task, ms) for g, ms in sorted(members.items())}
    result = TaskResult(task.name, task.version, "generate", str(rows[0].get("model", "")) if rows else "",
                        len(rows), n_errors, _values(task, scored), groups)  # fmt: skip
    (results_dir / f"{task.name}.json").write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    return result


def run_lmms_infer(names: Sequence[str], backend: ScoringBackend, run_dir: Path, limit: float | None,
                   gen: GenSettings | None, show_progress: bool) -> list[InferStats]:
    """Infer every benchmark of ``names`` into ``run_dir/predictions``."""
    from lmmbench.evaluation.lmms import get_lmms_task

    out = []
    for name in names:
        task = get_lmms_task(name)
        pred = run_dir / "predictions" / f"{name}.jsonl"
        if not show_progress:
            out.append(infer_lmms(task, backend, pred, limit, gen))
            continue
        from rich.progress import Progress, TaskID

        with Progress(transient=True) as bar:
            tid = bar.add_task(name, total=None)

            def advance(n: int, bar: Progress = bar, tid: TaskID = tid) -> None:
                bar.advance(tid, n)

            out.append(infer_lmms(task, backend, pred, limit, gen, progress=advance))
    return out


def run_lmms_eval(names: Sequence[str], run_dir: Path, limit: float | None) -> list[TaskResult]:
    """Score every benchmark of ``names`` from ``run_dir/predictions``."""
    from lmmbench.evaluation.lmms import get_lmms_task

    return [evaluate_lmms(get_lmms_task(n), run_dir / "predictions" / f"{n}.jsonl", run_dir / "results", limit)
            for n in names]  # fmt: skip
