"""Inference (AISBench's `infer` mode): turn samples into requests, run them, append predictions.

Every sample becomes one prediction line in ``predictions/<task>.jsonl``, written and flushed as soon
as its chunk returns. A prediction's ``key`` hashes the model, the task's name, version and
fingerprint, the rendered prompt and the generation parameters; a rerun skips samples whose key is
already there without an error, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.backends.scoring import GenRequest, LLRequest, ScoringBackend
from lmmbench.core.errors import UserError
from lmmbench.evaluation.eval_options import request_seed
from lmmbench.evaluation.prompts import PromptRenderer, RenderedSample, chat_messages, maybe_delimit
from lmmbench.evaluation.task_config import TaskConfig, check_group_columns, group_columns
from lmmbench.evaluation.task_data import read_source

__all__ = [
    "InferStats", "SampleJob", "build_jobs", "check_first_prompt", "check_group_by", "read_predictions", "run_infer",
    "server_metrics_of", "truncated_flags",
]

log = logging.getLogger(__name__)


@dataclass
class SampleJob:
    """The requests of one sample and the prediction row they fill in."""

    key: str
    row: dict[str, Any]
    ll: list[LLRequest] = field(default_factory=list)
    rolling: str | None = None
    gen: GenRequest | None = None


@dataclass
class InferStats:
    """What one infer pass did."""

    task: str
    total: int
    skipped: int
    done: int
    errors: int
    wall_s: float


def _media(task: TaskConfig, doc: dict[str, Any], column: str | None, doc_id: int) -> list[str]:
    if column is None:
        return []
    if column not in doc:
        raise UserError(f"{task.source_file}: sample {doc_id}: media column '{column}' is missing")
    value = doc[column]
    values = value if isinstance(value, list) else [value]
    base = task.resolve(task.data.path).parent
    out = []
    for v in values:
        p = Path(str(v)).expanduser()
        out.append(str(p if p.is_absolute() else base / p))
    return out


def _key(key_base: list[Any], payload: Any) -> str:
    """The prediction key: ``key_base`` (model id, task name, version, fingerprint) and the sample's payload."""
    blob = json.dumps([*key_base, payload], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


_SCORED = ("multiple_choice", "loglikelihood")  # log-likelihood kinds whose context takes a chat template
ChatPrompt = Callable[[list[dict[str, str]], int, int], str]


def _render(task: TaskConfig, first_only: bool = False) -> tuple[list[dict[str, Any]], list[RenderedSample]]:
    """The samples of ``task`` (its ``limit``, or only the first) and their rendered prompts."""
    full = read_source(task.data.model_copy(update={"limit": None}), task)
    docs = full[: task.data.limit] if task.data.limit is not None else full
    docs = docs[:1] if first_only else docs
    columns = set().union(*(d.keys() for d in full))
    own_split = task.fewshot.source is None
    pool = full if own_split else read_source(task.fewshot.source, task)  # type: ignore[arg-type]
    exclude = own_split if task.fewshot.exclude_eval_doc is None else task.fewshot.exclude_eval_doc
    return docs, PromptRenderer(task, columns).render_all(docs, pool, pool_is_eval_split=exclude)


def check_first_prompt(task: TaskConfig) -> None:
    """Render the first sample of ``task`` before any model loads: a template error or a prompt past the
    ``prompt_chars`` bound is one line in seconds, not after the model's load."""
    _render(task, first_only=True)


def check_group_by(task: TaskConfig) -> None:
    """Refuse a ``group_by`` column that none of ``task``'s samples has (``task_config.check_group_columns``)."""
    if task.group_by:
        full = read_source(task.data.model_copy(update={"limit": None}), task)
        check_group_columns(task.task, task.group_by, set().union(*(d.keys() for d in full)))


def build_jobs(task: TaskConfig, model_id: str, chat_prompt: ChatPrompt | None = None) -> list[SampleJob]:
    """Render every sample of ``task`` into its requests (``chat_prompt``: the backend's chat template)."""
    docs, rendered = _render(task)
    jobs: list[SampleJob] = []
    if task.chat_template and task.kind in _SCORED and chat_prompt is None:
        raise UserError(f"{task.source_file}: chat_template needs a model to render the chat template")
    key_base = [model_id, task.task, task.version, task.fingerprint()]  # once per task, not per sample
    for doc, r in zip(docs, rendered, strict=True):
        jobs.append(_job(task, model_id, key_base, doc, r, chat_prompt))
    return jobs


def _job(
    task: TaskConfig,
    model_id: str,
    key_base: list[Any],
    doc: dict[str, Any],
    r: RenderedSample,
    chat_prompt: ChatPrompt | None,
) -> SampleJob:
    images = _media(task, doc, task.image_column, r.doc_id)
    audio = _media(task, doc, task.audio_column, r.doc_id)
    # with a chat template (lm-eval's apply_chat_template): the description joins the system prompt,
    # the few-shot examples are user / assistant turns (or one user turn), the target delimiter is dropped
    messages: list[dict[str, str]] | None = None
    if task.chat_template:
        system = maybe_delimit(task.system_prompt, task.description, task.fewshot_delimiter)
        messages = chat_messages(r, system, task.fewshot_as_multiturn)
    context = r.context
    delimiter = task.target_delimiter
    if messages is not None and task.kind in _SCORED and chat_prompt is not None:
        context = chat_prompt(messages, len(images), len(audio))
        delimiter = ""
    meta = {c: doc.get(c) for c in group_columns(task.group_by)}
    row: dict[str, Any] = {
        "task": task.task,
        "task_version": task.version,
        "doc_id": r.doc_id,
        "kind": task.kind,
        "model": model_id,
        "prompt": context,
        "meta": meta,
    }
    if task.kind == "multiple_choice":
        choices = r.choices or []
        row.update(choices=choices, gold=r.gold)
        reqs = [LLRequest(context, delimiter + c, images, audio) for c in choices]
        return SampleJob(_key(key_base, [context, choices, images, audio]), row, ll=reqs)
    if task.kind == "loglikelihood":  # lm-eval: (context, target), no delimiter between them
        cont = r.references[0] if r.references else ""
        row.update(choices=[cont], gold=0)
        return SampleJob(_key(key_base, [context, cont]), row, ll=[LLRequest(context, cont, images, audio)])
    if task.kind == "loglikelihood_rolling":
        text = r.references[0] if r.references else ""
        row.update(words=len(re.split(r"\s+", text)), bytes=len(text.encode("utf-8")))
        return SampleJob(_key(key_base, [text]), row, rolling=text)
    g = task.generation
    gen = GenRequest(r.context, g.max_tokens, list(g.stop), images, audio, messages is not None, messages=messages,
                     temperature=g.temperature, top_p=g.top_p, top_k=g.top_k,
                     seed=request_seed(g.seed, r.doc_id) if g.temperature > 0 else None)  # fmt: skip
    if messages is not None and chat_prompt is not None:
        row["prompt"] = chat_prompt(messages, len(images), len(audio))  # what the model sees, for the record
    row.update(references=r.references)
    payload = [r.context, images, audio, g.max_tokens, g.stop, messages]
    if g.temperature > 0:  # sampled: the settings and the sampling seed are part of what was asked
        payload += [g.temperature, g.top_p, g.top_k, gen.seed]
    return SampleJob(_key(key_base, payload), row, gen=gen)


def read_predictions(path: Path) -> dict[str, dict[str, Any]]:
    """Prediction rows by key (the last line of a key wins); unreadable lines are skipped with a warning."""
    out: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return out
    from lmmbench.config.input_files import read_text

    for i, line in enumerate(read_text(path, "predictions file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            log.warning("%s:%d: not valid JSON, ignored (a run killed mid-write?)", path, i)
            continue
        if isinstance(row, dict) and "key" in row:
            out[str(row["key"])] = row
    return out


def repair_predictions(path: Path) -> int:
    """Drop the lines a killed run left half-written (not JSON), once, before a resumed run appends.

    Returns how many lines were removed; the file is rewritten atomically.
    """
    if not path.is_file():
        return 0
    from lmmbench.config.input_files import read_text

    kept, dropped = [], 0
    for line in read_text(path, "predictions file").splitlines():
        if not line.strip():
            continue
        try:
            json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            dropped += 1
            continue
        kept.append(line)
    if dropped:
        tmp = path.with_suffix(".repair.tmp")
        tmp.write_text("".join(f"{k}\n" for k in kept), encoding="utf-8")
        tmp.replace(path)
        log.warning("%s: removed %d half-written line(s) left by an interrupted run", path, dropped)
    return dropped


def _run_chunk(backend: ScoringBackend, jobs: Sequence[SampleJob]) -> list[dict[str, Any] | BaseException]:
    """Fill in the results of ``jobs``; one failing request fails only its own sample."""
    out: list[dict[str, Any] | BaseException] = []
    ll_reqs = [r for j in jobs for r in j.ll]
    rolling = [j.rolling for j in jobs if j.rolling is not None]
    gens = [j.gen for j in jobs if j.gen is not None]
    ll_res: list[Any] = backend.loglikelihood(ll_reqs) if ll_reqs else []
    ll_cut = truncated_flags(backend, len(ll_reqs))
    roll_res: list[Any] = backend.loglikelihood_rolling(rolling) if rolling else []
    gen_res: list[Any] = backend.generate(gens) if gens else []
    gen_cut = truncated_flags(backend, len(gens))
    gen_metrics = server_metrics_of(backend, len(gens))
    li = ri = gi = 0
    for j in jobs:
        if j.ll:
            part = ll_res[li : li + len(j.ll)]
            cut = _cut_count(ll_cut[li : li + len(j.ll)])
            li += len(j.ll)
            bad = [x for x in part if isinstance(x, BaseException)]
            out.append(bad[0] if bad else {"loglikelihoods": [p[0] for p in part], "is_greedy": [p[1] for p in part],
                                            "truncated": cut})  # fmt: skip
        elif j.rolling is not None:
            x = roll_res[ri]
            ri += 1
            out.append(x if isinstance(x, BaseException) else {"loglikelihood": float(x)})
        else:
            x = gen_res[gi]
            g_cut = _cut_count(gen_cut[gi : gi + 1])
            gi += 1
            res: dict[str, Any] = {"output": str(x), "truncated": g_cut}
            if gen_metrics[gi - 1] is not None:  # the server's own timings of this answer, kept as sent
                res["server_metrics"] = gen_metrics[gi - 1]
            out.append(x if isinstance(x, BaseException) else res)
    return out


def truncated_flags(backend: ScoringBackend, n: int) -> list[bool | None]:
    """Per request of the backend's last call: whether its context was truncated; None where the backend does
    not say (an endpoint's generation: the server keeps its own rules)."""
    truncation = getattr(backend, "truncation", None)
    flags = list(getattr(truncation, "last", None) or [])
    return list(flags) if len(flags) == n else [None] * n


def server_metrics_of(backend: ScoringBackend, n: int) -> list[dict[str, Any] | None]:
    """Per request of the backend's last ``generate``: the server-side ``metrics`` its answer carried (None where
    it carried none, or the backend runs in-process)."""
    got = list(getattr(backend, "server_metrics", None) or [])
    return got if len(got) == n else [None] * n


def _cut_count(flags: list[bool | None]) -> int | None:
    return None if any(f is None for f in flags) else sum(bool(f) for f in flags)


def run_infer(
    task: TaskConfig,
    backend: ScoringBackend,
    pred_path: Path,
    chunk_size: int = 64,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> InferStats:
    """Run every pending sample of ``task`` and append its prediction to ``pred_path``."""
    t0 = time.perf_counter_ns()
    jobs = build_jobs(task, backend.model_id, backend.chat_prompt)
    if on_total is not None:
        on_total(len(jobs))
    repair_predictions(pred_path)
    existing = read_predictions(pred_path)
    pending = [j for j in jobs if j.key not in existing or existing[j.key].get("error")]
    skipped = len(jobs) - len(pending)
    if progress is not None and skipped:
        progress(skipped)
    pred_path.parent.mkdir(parents=True, exist_ok=True)
    done = errors = 0
    with pred_path.open("a", encoding="utf-8") as fh:
        for start in range(0, len(pending), chunk_size):
            chunk = pending[start : start + chunk_size]
            c0 = time.perf_counter_ns()
            try:
                results = _run_chunk(backend, chunk)
            except UserError:
                raise
            except Exception as exc:  # isolate the failing sample(s)
                log.info("chunk failed (%s); retrying sample by sample", exc)
                results = []
                for j in chunk:
                    try:
                        results.extend(_run_chunk(backend, [j]))
                    except UserError:
                        raise
                    except Exception as one_exc:
                        results.append(one_exc)
            per_ms = (time.perf_counter_ns() - c0) / 1e6 / max(1, len(chunk))
            for j, res in zip(chunk, results, strict=True):
                row = dict(j.row, key=j.key, elapsed_ms=round(per_ms, 3))
                if isinstance(res, BaseException):
                    row["error"] = f"{type(res).__name__}: {res}"
                    errors += 1
                else:
                    row.update(res)
                    row["error"] = None
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                fh.flush()
                done += 1
            if progress is not None:
                progress(len(chunk))
    wall_s = (time.perf_counter_ns() - t0) / 1e9
    return InferStats(task.task, len(jobs), skipped, done, errors, wall_s)
