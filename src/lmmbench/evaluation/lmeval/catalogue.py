"""lm-evaluation-harness's whole catalogue by name (``pip install 'lmmbench[lmeval]'``: lm-eval 0.4.13).

A ``--tasks`` name that is not one of lmmbench's own (built-in, registered, a file, a name in
``--include-path`` that lmmbench's translator reads) is looked up in lm-eval's ``TaskManager``: any task, group
or tag of its catalogue, and of ``--include-path``. lm-eval builds the task objects itself — hub data sets
through ``datasets`` (cache, online or offline), ``!function`` Python, ``process_docs`` / ``process_results``,
custom metrics and aggregations, repeats, groups with ``aggregate_metric_list`` — so every upstream task
works as lm-eval runs it. The model calls are lmmbench's own: ``LmmbenchLM`` answers lm-eval's instances
with the run's scoring backend (the in-process scorer with its batching and caching, or the endpoint
client), not lm-eval's HF wrapper. Results are written in lmmbench's run layout (predictions per sample,
results per task and group, the summary, the run log), so catalogue runs are ordinary eval runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = [
    "catalogue_available",
    "catalogue_knows",
    "catalogue_output_types",
    "gen_request",
    "make_lm",
    "run_catalogue",
    "sampling_from_gen_kwargs",
]

log = logging.getLogger("lmmbench.eval")
INSTALL = "pip install -c constraints.txt 'lmmbench[lmeval]'"


def catalogue_available() -> bool:
    """Whether lm-evaluation-harness is installed."""
    import importlib.util

    return importlib.util.find_spec("lm_eval") is not None


@lru_cache(maxsize=4)
def _task_manager(include_path: tuple[str, ...]) -> Any:
    from lmmbench.evaluation.lmeval.task_index_cache import cached_task_manager

    return cached_task_manager(include_path)


def catalogue_knows(name: str, include_path: list[Path]) -> bool:
    """Whether ``name`` is a task, group or tag of lm-eval's catalogue (or of ``include_path``), from the index of
    ``lmeval_index`` (``lm_eval.tasks`` is not imported: an unknown name costs no catalogue build)."""
    if not catalogue_available():
        return False
    from lmmbench.evaluation.lmeval.index import catalogue_index

    index = catalogue_index(include_path)
    return index is not None and name in index[0]


def catalogue_output_types(names: list[str], include_path: list[Path]) -> list[str | None]:
    """lm-eval's ``output_type`` of each catalogue task in ``names`` read from its YAML (no data, no code run);
    ``None`` for a group, a tag, a Python task or a file that cannot be read so."""
    from lm_eval.tasks._index import Kind
    from lm_eval.tasks._yaml_loader import load_yaml

    index = _task_manager(tuple(str(p) for p in include_path)).task_index
    out: list[str | None] = []
    for name in names:
        entry = index.get(name)
        kind: str | None = None
        if entry is not None and entry.kind == Kind.TASK and entry.yaml_path is not None:
            try:
                kind = str(load_yaml(entry.yaml_path, resolve_func=False).get("output_type") or "generate_until")
            except Exception:  # unknown, so nothing is refused on its account
                kind = None
        out.append(kind)
    return out


def make_lm(backend: Any) -> Any:
    """An ``lm_eval.api.model.LM`` whose requests lmmbench's scoring ``backend`` answers."""
    from lm_eval.api.model import LM

    from lmmbench.backends.scoring import LLRequest
    from lmmbench.evaluation.runner import truncated_flags

    def _values(out: list[Any], what: str) -> list[Any]:
        for o in out:
            if isinstance(o, Exception):  # lm-eval has no per-sample error slot: the run stops, naming the cause
                raise UserError(f"{what} failed on the model: {type(o).__name__}: {o}")
        return out

    class LmmbenchLM(LM):  # type: ignore[misc]
        """lm-eval's model interface over lmmbench's scoring backend; ``truncated``: per task and request kind,
        how many contexts were left-truncated to the model's window (None: not known for that kind)."""

        truncated: dict[str, dict[str, int | None]] = {}

        def _count(self, requests: list[Any], kind: str) -> None:
            for r, cut in zip(requests, truncated_flags(backend, len(requests)), strict=True):
                row = self.truncated.setdefault(str(getattr(r, "task_name", None)), {"generate_until": 0,
                                                                                      "loglikelihood": 0})
                before = row.get(kind, 0)
                row[kind] = None if cut is None or before is None else before + int(cut)

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
            out = backend.loglikelihood([LLRequest(*r.args[:2]) for r in requests])
            self._count(requests, "loglikelihood")
            return [(float(ll), bool(greedy)) for ll, greedy in _values(out, "loglikelihood")]

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
            out = backend.loglikelihood_rolling([r.args[0] for r in requests])
            return [float(x) for x in _values(out, "loglikelihood_rolling")]

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            gens = [gen_request(r.args[0], dict(r.args[1] or {})) for r in requests]
            out = backend.generate(gens)
            self._count(requests, "generate_until")
            return [str(x) for x in _values(out, "generate_until")]

        def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
            return str(backend.chat_prompt(chat_history))

        @property
        def tokenizer_name(self) -> str:
            return str(backend.model_id)

    return LmmbenchLM()


def sampling_from_gen_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """lm-eval's sampling rule (``normalize_gen_kwargs``): ``do_sample`` true, or absent with a temperature
    above 0, samples at that temperature (with ``top_p`` / ``top_k`` when given); otherwise greedy."""
    temperature = float(kwargs.get("temperature") or 0.0)
    do_sample = kwargs.get("do_sample")
    sample = bool(do_sample) if do_sample is not None else temperature > 0.0
    if not sample or temperature <= 0.0:
        return {"temperature": 0.0, "top_p": 1.0, "top_k": 0}
    return {"temperature": temperature, "top_p": float(kwargs.get("top_p") or 1.0),
            "top_k": int(kwargs.get("top_k") or 0)}  # fmt: skip


_MAX_TOKEN_KEYS = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")  # lm-eval's priority


def gen_request(context: str, kwargs: dict[str, Any], default_max: int = 256) -> Any:
    """lmmbench's generation request for lm-eval's ``generate_until`` arguments (``until``, the max-token
    aliases in lm-eval's priority, its default of 256, its sampling rule)."""
    from lmmbench.backends.scoring import GenRequest

    until = kwargs.get("until") or []
    max_tokens = next((kwargs[k] for k in _MAX_TOKEN_KEYS if kwargs.get(k) is not None), default_max)
    return GenRequest(prompt=context, max_tokens=int(max_tokens), stop=[until] if isinstance(until, str) else
                      list(until), **sampling_from_gen_kwargs(kwargs))  # fmt: skip


def _metric_name(key: str) -> tuple[str, bool] | None:
    """lm-eval's ``acc_stderr,none`` -> (``acc``, True); ``exact_match,strict-match`` -> (that, False)."""
    if "," not in key:
        return None
    base, _, flt = key.partition(",")
    is_err = base.endswith("_stderr")
    base = base.removesuffix("_stderr")
    return (base if flt in ("", "none") else f"{base},{flt}"), is_err


def _task_result(name: str, row: dict[str, Any], kind: str, model: str, n: int, version: Any) -> Any:
    from lmmbench.evaluation.evaluate import TaskResult
    from lmmbench.metrics.accuracy import MetricValue

    values: dict[str, dict[str, Any]] = {}
    for key, value in row.items():
        parsed = _metric_name(key)
        if parsed is None or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        metric, is_err = parsed
        values.setdefault(metric, {})["stderr" if is_err else "value"] = float(value)
    metrics = {m: MetricValue(m, v["value"], v.get("stderr"), n) for m, v in values.items() if "value" in v}
    return TaskResult(task=name, version=version if version is not None else "", kind=kind, model=model,
                      n_samples=n, n_errors=0, metrics=metrics)  # fmt: skip


def _task_truncation(row: dict[str, int | None] | None) -> dict[str, int] | None:
    """A task's truncation counts; None when a kind it used is not known (an endpoint's generation)."""
    if row is None:
        return {"generate_until": 0, "loglikelihood": 0}  # no request of a kind that truncates (rolling only)
    if any(v is None for v in row.values()):
        return None
    return {k: int(v or 0) for k, v in row.items()}


def _write_predictions(run_dir: Path, task: str, samples: list[dict[str, Any]]) -> None:
    path = run_dir / "predictions" / f"{task}.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for s in samples:
            row = {"doc_id": s.get("doc_id"), "prompt": (s.get("arguments") or [[None]])[0][0],
                   "target": s.get("target"), "resps": s.get("resps"), "filtered_resps": s.get("filtered_resps"),
                   "filter": s.get("filter"), "metrics": s.get("metrics"), "error": None}  # fmt: skip
            row.update({k: s[k] for k in s.get("metrics") or [] if k in s})
            fh.write(json.dumps(row, default=str) + "\n")


def _write_sample_metrics(run_dir: Path, task: str, samples: list[dict[str, Any]]) -> None:
    """``results/<task>_metrics.csv``: one row per document, each metric (``name,filter`` past the first filter),
    as lmmbench's own tasks write it (``runs compare`` reads per-sample values from it)."""
    import csv

    rows: dict[Any, dict[str, Any]] = {}
    for s in samples:
        flt = str(s.get("filter") or "none")
        row = rows.setdefault(s.get("doc_id"), {})
        for metric in s.get("metrics") or []:
            value = s.get(metric)
            if isinstance(value, (int, float)):  # bools too: a per-sample accuracy
                row[metric if flt in ("", "none") else f"{metric},{flt}"] = float(value)
    columns = list(dict.fromkeys(k for r in rows.values() for k in r))
    with (run_dir / "results" / f"{task}_metrics.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["doc_id", *columns, "error"])
        for doc, row in rows.items():
            writer.writerow([doc, *(row.get(c, "") for c in columns), ""])


def run_catalogue(cfg: Any, names: list[str], backend: Any, run_dir: Path,
                  lm_wrap: Callable[[Any], Any] | None = None) -> list[Any]:  # fmt: skip
    """Evaluate catalogue ``names`` with lm-eval's task system and lmmbench's ``backend``; returns
    ``TaskResult``s (tasks, then groups) written into ``run_dir/results``. ``lm_wrap``: applied to the lm-eval
    model first (``perf --tasks`` tags each request with its task and document)."""
    if not catalogue_available():
        raise UserError(f"--tasks {', '.join(names)}: lm-evaluation-harness's catalogue needs {INSTALL}")
    from lm_eval import simple_evaluate

    seeds = cfg.seed_values()
    lm = make_lm(backend)
    lm.truncated = {}
    try:
        out = simple_evaluate(
            model=(lm_wrap or (lambda x: x))(lm), tasks=names,
            task_manager=_task_manager(tuple(str(p) for p in cfg.include_path)),
            num_fewshot=cfg.num_fewshot, limit=cfg.limit, log_samples=True, gen_kwargs=cfg.gen_kwargs,
            system_instruction=cfg.system_instruction, apply_chat_template=cfg.apply_chat_template,
            fewshot_as_multiturn=cfg.fewshot_as_multiturn, random_seed=seeds[0], numpy_random_seed=seeds[1],
            torch_random_seed=seeds[2], fewshot_random_seed=seeds[3], bootstrap_iters=cfg.bootstrap_iters,
        )  # fmt: skip
    except (UserError, KeyboardInterrupt):
        raise
    except (ValueError, KeyError, TypeError, FileNotFoundError, ConnectionError) as exc:  # the task's data / options
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise UserError(f"--tasks {', '.join(names)}: lm-eval could not build or run them: "
                        f"{type(exc).__name__}: {first[:300]}") from None
    if out is None:
        raise UserError(f"--tasks {', '.join(names)}: lm-eval returned no results")
    results: list[Any] = []
    samples = out.get("samples") or {}
    counts = out.get("n-samples") or {}
    for task, rows in out["results"].items():
        n = int((counts.get(task) or {}).get("effective") or len(samples.get(task) or []))
        group = task not in samples
        kind = "group" if group else str((out.get("configs") or {}).get(task, {}).get("output_type", "lm-eval"))
        result = _task_result(task, rows, kind, str(cfg.model), n, (out.get("versions") or {}).get(task))
        if not group:
            result.truncated = _task_truncation(lm.truncated.get(task))
            _write_predictions(run_dir, task, samples[task])
            _write_sample_metrics(run_dir, task, samples[task])
        (run_dir / "results" / f"{task}.json").write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n",
                                                        encoding="utf-8")  # fmt: skip
        results.append(result)
    return results
