"""Compare an `lmmbench eval` run with lm-evaluation-harness's output for the same task files.

``reference_from_lmeval`` turns lm-eval's logged samples and results (as ``benchmarks/lmeval_side.py``
writes them) into a small reference: per task and document the prompt, every log-likelihood and
greedy flag, the generated text and each filter's answer; per task and group every aggregate with
its standard error, named as lmmbench names them (``acc``, ``exact_match,strict-match``).
``compare_run`` checks a run's predictions and results against it: log-likelihoods within
``atol + rtol * |lm-eval's value|`` (float32 log-likelihoods of magnitude 30-500 move by one ULP,
3.8e-6 to 3.8e-5 absolute, between CPUs: a stored reference is equal only to about 1e-7 relative),
aggregates within ``tol`` (relative for the perplexities), prompts, generations and filtered answers equal.
The stored reference lets a test check lm-eval parity without lm-eval installed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmmbench.evaluation.lmeval.filters import apply_pipeline
from lmmbench.evaluation.task_config import TaskConfig

__all__ = ["compare_run", "reference_from_lmeval"]

_RELATIVE = {"perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte"}
_BOOTSTRAPPED = {"perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte"}  # random stderrs


def _metric_name(lm_eval_key: str) -> tuple[str, bool]:
    """lm-eval's ``acc_stderr,none`` -> (``acc``, True); ``exact_match,strict`` -> (``exact_match,strict``, False)."""
    base, _, flt = lm_eval_key.partition(",")
    is_err = base.endswith("_stderr")
    base = base[: -len("_stderr")] if is_err else base
    return (base if flt in ("", "none") else f"{base},{flt}"), is_err


def _aggregates(metrics: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for key, value in metrics.items():
        if "," not in key or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue  # "alias", "samples", "sample_len" ...
        name, is_err = _metric_name(key)
        out.setdefault(name, {"value": None, "stderr": None})["stderr" if is_err else "value"] = float(value)
    return out


def _sample(s: dict[str, Any]) -> dict[str, Any]:
    resps = s["resps"]
    first = resps[0][0] if resps and resps[0] else None
    row: dict[str, Any] = {"prompt": s["arguments"][0][0] if s["arguments"] else None}
    if isinstance(first, str):
        row["output"] = first
    elif isinstance(first, (list, tuple)):
        row["loglikelihoods"] = [float(r[0][0]) for r in resps]
        row["is_greedy"] = [bool(r[0][1]) for r in resps]
    else:
        row["loglikelihoods"] = [] if first is None else [float(first)]  # rolling: one float per document
    return row


def reference_from_lmeval(lme: dict[str, Any], groups: Sequence[str] = ()) -> dict[str, Any]:
    """The reference of lm-eval's answer (``lmeval_side.py``'s JSON)."""
    tasks: dict[str, Any] = {}
    for task, samples in lme["samples"].items():
        docs: dict[str, Any] = {}
        for s in samples:
            row = docs.setdefault(str(s["doc_id"]), _sample(s))
            if "output" in row:
                filtered = s["filtered_resps"][0]
                row.setdefault("filtered", {})[s.get("filter", "none")] = (
                    filtered[0] if isinstance(filtered, list) else filtered
                )
        tasks[task] = {"samples": docs, "metrics": _aggregates(lme["results"][task])}
    return {
        "tasks": tasks,
        "groups": {g: {"metrics": _aggregates(lme["results"][g])} for g in groups if g in lme["results"]},
        "lm_eval_version": lme.get("lm_eval_version"),
    }


def _predictions(run_dir: Path, task: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for line in (run_dir / "predictions" / f"{task}.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out[str(row["doc_id"])] = row
    return out


def _compare_samples(
    task: TaskConfig, ref: dict[str, Any], ours: dict[str, dict[str, Any]], tol: float, rtol: float
) -> dict[str, Any]:
    max_ll, max_rel, n_ll, mismatches = 0.0, 0.0, 0, []
    ll_ok = True
    for doc_id, theirs in ref.items():
        mine = ours.get(doc_id)
        if mine is None:
            mismatches.append(f"doc {doc_id}: missing")
            continue
        if task.kind != "loglikelihood_rolling" and theirs["prompt"] != mine["prompt"]:
            mismatches.append(f"doc {doc_id}: prompt")
        if "output" in theirs:
            if theirs["output"] != mine.get("output"):
                mismatches.append(f"doc {doc_id}: generated text")
            for flt, answer in theirs.get("filtered", {}).items():
                pipe = next((f for f in task.filters if f.name == flt), None)
                got = str(mine.get("output")) if pipe is None else apply_pipeline(pipe, str(mine.get("output")))
                if got != answer:
                    mismatches.append(f"doc {doc_id}: filter {flt}")
            continue
        lls = mine.get("loglikelihoods") or [mine.get("loglikelihood")]
        for a, b in zip(lls, theirs["loglikelihoods"], strict=True):
            diff = abs(float(a) - b)
            max_ll, n_ll = max(max_ll, diff), n_ll + 1
            max_rel = max(max_rel, diff / abs(b)) if b else max_rel
            ll_ok = ll_ok and diff <= tol + rtol * abs(b)
        if "is_greedy" in theirs and mine.get("is_greedy") != theirs["is_greedy"]:
            mismatches.append(f"doc {doc_id}: is_greedy")
    return {
        "loglikelihoods": n_ll,
        "max_abs_ll_diff": max_ll,
        "max_rel_ll_diff": max_rel,
        "ll_within_tolerance": ll_ok,
        "mismatches": mismatches,
    }


def _compare_metrics(ref: dict[str, Any], ours: dict[str, Any], tol: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, theirs in ref.items():
        base = name.partition(",")[0]
        mine = ours.get(name)
        for field in ("value", "stderr"):
            if theirs[field] is None or (field == "stderr" and base in _BOOTSTRAPPED):
                continue
            got = None if mine is None else mine.get(field)
            if got is None:
                out[f"{name}:{field}"] = {"lm_eval": theirs[field], "lmmbench": None, "ok": False}
                continue
            diff = abs(float(got) - theirs[field])
            rel = base in _RELATIVE and field == "value"
            err = diff / abs(theirs[field]) if rel and theirs[field] else diff
            out[f"{name}:{field}"] = {"lm_eval": theirs[field], "lmmbench": got, "abs_diff": diff, "ok": err <= tol}
    return out


def compare_run(
    reference: dict[str, Any],
    tasks: Sequence[TaskConfig],
    run_dir: Path,
    results: Sequence[dict[str, Any]],
    tol: float = 1e-6,
    ll_rtol: float = 1e-6,
) -> dict[str, Any]:
    """Every task and group of ``reference`` against the run; ``ok`` when all agree.

    A log-likelihood agrees when ``|ours - theirs| <= tol + ll_rtol * |theirs|``: float32 sums differ in
    the last bit between CPUs, so a reference stored on another machine holds only to about 1e-7 relative.
    """
    ours = {r["task"]: r["metrics"] for r in results}
    report: dict[str, Any] = {"tasks": {}, "groups": {}, "ok": True, "tolerance": tol, "ll_rtol": ll_rtol}
    for task in tasks:
        ref = reference["tasks"][task.task]
        entry = _compare_samples(task, ref["samples"], _predictions(run_dir, task.task), tol, ll_rtol)
        entry["samples"] = len(ref["samples"])
        entry["aggregates"] = _compare_metrics(ref["metrics"], ours.get(task.task, {}), tol)
        entry["ok"] = (
            entry["ll_within_tolerance"]
            and not entry["mismatches"]
            and all(a["ok"] for a in entry["aggregates"].values())
        )
        report["tasks"][task.task] = entry
        report["ok"] = report["ok"] and entry["ok"]
    for group, ref in reference.get("groups", {}).items():
        aggs = _compare_metrics(ref["metrics"], ours.get(group, {}), tol)
        report["groups"][group] = {"aggregates": aggs, "ok": bool(aggs) and all(a["ok"] for a in aggs.values())}
        report["ok"] = report["ok"] and report["groups"][group]["ok"]
    return report
