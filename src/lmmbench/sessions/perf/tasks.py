"""Evaluation tasks as a perf workload (AISBench's ``--mode perf``: infer -> perf summary, the data sets of one
run merged into one stream).

The requests are the ones ``eval --model URL`` sends, built by eval's own code: the tasks are resolved by
``evaluation.modes`` (``--limit``, ``--num-fewshot``, ``--prompt`` ...), every document is rendered into its requests
by ``evaluation.runner.build_jobs``, and each request body is the one ``backends.scoring_openai.OpenAIScorer``
would post (a scorer whose ``_post`` hands the body over instead of sending it). The load generator adds
``stream`` / ``stream_options`` to generation requests (to time the first token); log-likelihood requests
(``echo`` + ``logprobs`` completions) go unstreamed, as eval sends them, after one probe request shows the
endpoint answers them with prompt log-probs (refused in one line where it does not).
"""

from __future__ import annotations

import asyncio
import copy
import json
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmmbench.backends.scoring import Progress
from lmmbench.backends.scoring_openai import OpenAIScorer
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest
from lmmbench.evaluation.eval_config import EvalConfig
from lmmbench.evaluation.task_config import TaskConfig

__all__ = ["TaskDoc", "TaskWorkload", "build_task_workload", "probe_loglikelihood"]

#: perf options that shape a synthetic or file data set or pick the API: with --tasks the tasks decide (each request
#: goes to the API eval sends it to), so they are refused
DATASET_FIELDS = (
    "dataset", "dataset_path", "input_tokens", "input_tokens_stddev", "output_tokens", "output_tokens_stddev",
    "ignore_eos", "system_prompt", "workload", "endpoint", "hf_name", "hf_split", "hf_subset", "hf_output_len",
    "spec_bench_category", "spec_bench_output_len",
)  # fmt: skip


@dataclass
class TaskDoc:
    """What one request of the workload asks: its task, document, part (answer choice / window) and the
    prediction row eval would fill in (references, choices)."""

    task: str
    doc_id: int
    kind: str
    part: int
    row: dict[str, Any]


@dataclass
class TaskWorkload:
    """The merged requests of a run's tasks, the document of each (same index) and the tasks by name."""

    requests: list[PerfRequest] = field(default_factory=list)
    docs: list[TaskDoc] = field(default_factory=list)
    tasks: dict[str, TaskConfig] = field(default_factory=dict)
    loglikelihood_body: dict[str, Any] | None = None  # the first echo + logprobs body, for the endpoint probe

    def distinct_docs(self, task: str) -> int:
        """Documents of ``task`` in one pass."""
        return len({d.doc_id for d in self.docs if d.task == task})


class _Captured(Exception):
    def __init__(self, path: str, body: dict[str, Any]) -> None:
        super().__init__(path)
        self.path, self.body = path, body


class _BodyScorer(OpenAIScorer):
    """eval's endpoint scorer, its request bodies handed over instead of posted."""

    captured: list[tuple[str, dict[str, Any]]]
    placeholders = False  # answer with neutral values (lm-eval's catalogue cannot take a failed request)

    async def _post(self, session: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raise _Captured(path, copy.deepcopy(body))

    def _run_all(self, jobs: Sequence[Callable[[Any], Awaitable[Any]]], progress: Progress | None) -> list[Any]:
        loop = asyncio.new_event_loop()
        out: list[Any] = []
        try:
            for job in jobs:
                try:
                    loop.run_until_complete(job(None))
                    out.append(RuntimeError("no request was built"))
                except _Captured as got:
                    self.captured.append((got.path, got.body))
                    out.append(((0.0, False) if "echo" in got.body else "") if self.placeholders else got)
        finally:
            loop.close()
        return out


class _NoTokenizer:
    """Stands in for a tokenizer when none was given: generation requests need none; anything that does
    (log-likelihood token ids, a chat template for multiple choice) is refused naming --tokenizer."""

    bos_token_id = None
    eos_token_id = 0

    def decode(self, _ids: Any) -> str:
        return ""

    def __getattr__(self, name: str) -> Any:
        raise UserError("--tokenizer <model name or dir> is required for these tasks (log-likelihood requests "
                        "are token ids; chat templates need the model's tokenizer)")


def _scorer(eval_cfg: EvalConfig, served: str) -> _BodyScorer:
    tok: Any = _NoTokenizer()
    if eval_cfg.tokenizer is not None:
        from transformers import AutoTokenizer

        from lmmbench.models import resolve_model

        tok = AutoTokenizer.from_pretrained(str(resolve_model(eval_cfg.tokenizer).path))
    scorer = _BodyScorer(eval_cfg.model or "http://127.0.0.1", served, tok, max_length=eval_cfg.max_length)
    scorer.captured = []
    return scorer


def _resolve_tasks(eval_cfg: EvalConfig) -> tuple[list[TaskConfig], list[str], list[str]]:
    """The tasks as eval resolves them (its own function): options applied, the first prompt rendered; the
    lm-eval catalogue names; the lmms-eval benchmarks."""
    from lmmbench.evaluation.lmms import is_lmms_task
    from lmmbench.evaluation.modes import _split_catalogue, _tasks, _with_options
    from lmmbench.evaluation.runner import check_first_prompt

    lmms = [n for n in eval_cfg.tasks if is_lmms_task(n)]
    rest = [n for n in eval_cfg.tasks if n not in lmms]
    own, catalogue = _split_catalogue(eval_cfg.model_copy(update={"mode": "all", "tasks": rest})) if rest else ([], [])
    tasks, _groups = _tasks(eval_cfg, own)
    tasks = _with_options(eval_cfg, tasks, catalogue, lmms)  # eval's prompt and generation options, or refused
    for task in tasks:
        check_first_prompt(task)
    return tasks, catalogue, lmms


def build_task_workload(eval_cfg: EvalConfig, served: str) -> TaskWorkload:
    """Every request eval would send for ``eval_cfg.tasks`` to ``served`` (in task order: one merged stream)."""
    from lmmbench.evaluation.runner import build_jobs

    scorer = _scorer(eval_cfg, served)
    out = TaskWorkload()
    tasks, catalogue, lmms = _resolve_tasks(eval_cfg)
    for task in tasks:
        if task.task in out.tasks:
            raise UserError(f"--tasks: task '{task.task}' is given twice")
        out.tasks[task.task] = task
        chat_prompt = None if isinstance(scorer.tokenizer, _NoTokenizer) else scorer.chat_prompt
        for job in build_jobs(task, scorer.model_id, chat_prompt):
            scorer.captured.clear()
            if job.gen is not None:
                scorer.generate([job.gen])
            elif job.ll:
                scorer.loglikelihood(job.ll)
            elif job.rolling is not None:
                scorer.loglikelihood_rolling([job.rolling])
            for part, (path, body) in enumerate(scorer.captured):
                _add(out, task.task, task.kind, job.row, part, path, body)
    if catalogue:
        _catalogue_requests(out, eval_cfg, scorer, catalogue)
    for name in lmms:
        _lmms_requests(out, eval_cfg, scorer, name)
    if not out.requests:
        raise UserError(f"--tasks {', '.join(eval_cfg.tasks)}: no documents to send")
    return out


def _catalogue_requests(out: TaskWorkload, eval_cfg: EvalConfig, scorer: _BodyScorer, names: list[str]) -> None:
    """The requests of lm-eval catalogue tasks, built by eval's catalogue run (lm-eval's own task objects) with
    each request tagged with its task and document (lm-eval's ``Instance``)."""
    import tempfile
    from pathlib import Path

    from lmmbench.evaluation.lmeval.catalogue import run_catalogue

    def tagging(lm: Any) -> Any:
        for name in ("generate_until", "loglikelihood", "loglikelihood_rolling"):
            setattr(lm, name, _tagged(getattr(lm, name), "generate" if name == "generate_until" else name))
        return lm

    def _tagged(method: Callable[..., list[Any]], kind: str) -> Callable[..., list[Any]]:
        def call(requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            results: list[Any] = []
            for r in requests:
                scorer.captured.clear()
                results += method([r], disable_tqdm)
                for part, (path, body) in enumerate(scorer.captured):
                    _add(out, str(r.task_name), kind, {"doc_id": int(r.doc_id)}, part + int(r.idx or 0), path, body)
            return results

        return call

    scorer.placeholders = True
    with tempfile.TemporaryDirectory(prefix="lmmbench-catalogue-") as tmp:
        for sub in ("results", "predictions"):
            (Path(tmp) / sub).mkdir()
        run_catalogue(eval_cfg.model_copy(update={"mode": "all"}), names, scorer, Path(tmp), lm_wrap=tagging)
    scorer.placeholders = False


def _lmms_requests(out: TaskWorkload, eval_cfg: EvalConfig, scorer: _BodyScorer, name: str) -> None:
    """The requests of an lmms-eval benchmark, built by eval's own inference of it (``infer_lmms``): each
    asked document's prediction row and captured body, in order."""
    import tempfile
    from pathlib import Path

    from lmmbench.evaluation.eval_options import GenSettings
    from lmmbench.evaluation.lmms import get_lmms_task
    from lmmbench.evaluation.lmms.run import infer_lmms

    scorer.captured.clear()
    with tempfile.TemporaryDirectory(prefix="lmmbench-lmms-") as tmp:
        pred = Path(tmp) / f"{name}.jsonl"
        infer_lmms(get_lmms_task(name), scorer, pred, eval_cfg.limit, GenSettings.from_config(eval_cfg))
        rows = [json.loads(line) for line in pred.read_text(encoding="utf-8").splitlines() if line.strip()]
    asked = [r for r in rows if "prompt" in r]
    if len(asked) != len(scorer.captured):
        raise RuntimeError(f"{name}: {len(scorer.captured)} request bodies for {len(asked)} documents")
    for row, (path, body) in zip(asked, scorer.captured, strict=True):
        _add(out, name, "generate", {"doc_id": int(row["doc_id"])}, 0, path, body)


def _add(out: TaskWorkload, task: str, kind: str, row: dict[str, Any], part: int, path: str,
         body: dict[str, Any]) -> None:  # fmt: skip
    payload = {k: v for k, v in body.items() if k != "model"}
    chat = path.endswith("/chat/completions")
    generate = kind == "generate"
    if not generate and out.loglikelihood_body is None:
        out.loglikelihood_body = body
    max_tokens = payload.get("max_tokens")
    labels = {"task": task, "doc_id": int(row["doc_id"])}
    if part:
        labels["part"] = part
    out.requests.append(PerfRequest(len(out.requests), payload, "chat" if chat else "completions",
                                    output_tokens=max_tokens if isinstance(max_tokens, int) else None,
                                    labels=labels, stream=generate))  # fmt: skip
    out.docs.append(TaskDoc(task, int(row["doc_id"]), kind, part, dict(row)))


def probe_loglikelihood(url: str, model: str, body: dict[str, Any], api_key: str | None, timeout_s: float) -> None:
    """Send one echo + logprobs completion; refuse (one line) when the endpoint does not answer prompt log-probs."""
    base = url.rstrip("/")
    base = base if base.endswith("/v1") else base + "/v1"
    data = json.dumps({**body, "model": model}).encode()
    req = urllib.request.Request(f"{base}/completions", data=data, method="POST",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {api_key}"} if api_key else {})})  # fmt: skip
    why = ""
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            answer = json.loads(resp.read())
        lps = answer["choices"][0]["logprobs"]["token_logprobs"]
        if not isinstance(lps, list) or not lps:
            why = "no prompt log-probs in its answer"
    except urllib.error.HTTPError as exc:
        why = f"HTTP {exc.code}"
    except (KeyError, IndexError, TypeError, ValueError):
        why = "no prompt log-probs in its answer"
    except OSError as exc:
        why = str(exc)
    if why:
        raise UserError(f"{base}/completions does not answer echo + logprobs ({why}): log-likelihood tasks cannot "
                        "be sent to this endpoint; give generation tasks (e.g. sample_qa) instead")
