"""Cross-check `lmmbench eval` against lm-evaluation-harness, and compare their wall time.

    .venv/bin/python benchmarks/eval_crosscheck.py --lm-eval-python /tmp/lmeval/bin/python \
        [--model tiny-llm] [--tasks sample_mc,sample_ppl] [--repeats 3] [--out outputs/eval_crosscheck]

lm-evaluation-harness is NOT a dependency of lmmbench: it runs in its own virtualenv, given by
``--lm-eval-python`` (a python with ``lm-eval[hf]`` installed), through ``benchmarks/lmeval_side.py``.
Both tools get the same local model directory and the same local data: every lmmbench task is
translated into an lm-eval task YAML (same Jinja2 templates, delimiters, few-shot count and seed).

1. Numerics: lm-eval at batch size 1 vs lmmbench at ``--batch-size`` (equal-length batches, which are
   bit-identical to batch size 1); compares every prompt string, every per-sample log-likelihood
   (each choice of each multiple-choice sample, each rolling document) and every aggregate
   (acc, acc_norm with their stderr, word_perplexity, byte_perplexity, bits_per_byte). Tolerance 1e-6
   (absolute for log-likelihoods and accuracies, relative for perplexities).
2. Throughput: the end-to-end wall time of each tool as a fresh process on the text sample tasks
   (``--throughput-tasks``), ``--repeats`` times alternating, medians reported.
Exit code 1 when any value differs by more than the tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from lmmbench.evaluation import EvalConfig, resolve_task, run_eval
from lmmbench.evaluation.task_config import TaskConfig
from lmmbench.models import resolve_model

TOL = 1e-6
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

_AGG = {
    "acc": "mean",
    "acc_norm": "mean",
    "exact_match": "mean",
    "word_perplexity": "weighted_perplexity",
    "byte_perplexity": "weighted_perplexity",
    "bits_per_byte": "bits_per_byte",
}
_LOWER_BETTER = {"word_perplexity", "byte_perplexity", "bits_per_byte"}


def lm_eval_task_yaml(task: TaskConfig) -> dict[str, Any]:
    """The lm-eval task config equivalent to an lmmbench task (text tasks)."""
    data = task.resolve(task.data.path).resolve()
    out_type = {"generate": "generate_until"}.get(task.kind, task.kind)
    cfg: dict[str, Any] = {
        "task": f"lmm_{task.task}",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "output_type": out_type,
        "doc_to_text": task.doc_to_text,
        "doc_to_target": task.doc_to_target,
        "target_delimiter": task.target_delimiter,
        "fewshot_delimiter": task.fewshot_delimiter,
        "num_fewshot": task.fewshot.num,
        "metadata": {"version": float(task.version) if str(task.version).replace(".", "").isdigit() else 1.0},
    }
    if task.fewshot.num:
        cfg["fewshot_split"] = "test"
        cfg["fewshot_config"] = {"sampler": "default"}
    if task.description:
        cfg["description"] = task.description
    if task.doc_to_choice is not None:
        cfg["doc_to_choice"] = task.doc_to_choice
    metrics = []
    for m in task.default_metrics():
        if m.name not in _AGG:
            continue
        entry: dict[str, Any] = {
            "metric": m.name,
            "aggregation": _AGG[m.name],
            "higher_is_better": m.name not in _LOWER_BETTER,
        }
        entry.update(m.options)
        metrics.append(entry)
    cfg["metric_list"] = metrics
    if task.kind == "generate":
        g = task.generation
        cfg["generation_kwargs"] = {"until": g.stop, "max_gen_toks": g.max_tokens, "do_sample": False}
        if g.answer_regex:
            cfg["filter_list"] = [
                {
                    "name": "extract",
                    "filter": [
                        {"function": "regex", "regex_pattern": g.answer_regex, "group_select": 0},
                        {"function": "take_first"},
                    ],
                }
            ]
    return cfg


def run_lm_eval(
    py: str, model_dir: Path, tasks: list[TaskConfig], work: Path, batch_size: int = 1, chat: bool = False
) -> dict[str, Any]:
    """Run lm-eval on ``tasks`` in its own interpreter (``chat``: --apply_chat_template); its JSON answer."""
    work = work / ("lm_eval_chat" if chat else "lm_eval_plain")
    tdir = work / "lm_eval_tasks"
    tdir.mkdir(parents=True, exist_ok=True)
    for t in tasks:
        (tdir / f"lmm_{t.task}.yaml").write_text(yaml.safe_dump(lm_eval_task_yaml(t), sort_keys=False))
    spec = {
        "model_dir": str(model_dir),
        "tasks_dir": str(tdir),
        "tasks": [f"lmm_{t.task}" for t in tasks],
        "batch_size": batch_size,
        "bootstrap_iters": 100,
        "apply_chat_template": chat,
    }
    spec_path = work / "lm_eval_spec.json"
    out_path = work / "lm_eval_out.json"
    spec_path.write_text(json.dumps(spec))
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_DATASETS_CACHE=str(work / "hf_datasets"))
    proc = subprocess.run(
        [py, str(HERE / "lmeval_side.py"), str(spec_path), str(out_path)], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"lm-eval failed (exit {proc.returncode})")
    result: dict[str, Any] = json.loads(out_path.read_text())
    return result


def chat_copies(names: list[str], work: Path) -> list[Path]:
    """Task YAMLs that are copies of ``names`` with ``chat_template: true`` (name suffixed ``_chat``)."""
    out = []
    folder = work / "chat_tasks"
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        t = resolve_task(name)
        data = yaml.safe_load(Path(t.source_file).read_text())
        data.update(task=f"{t.task}_chat", chat_template=True)
        data["data"]["path"] = str(t.resolve(t.data.path).resolve())
        path = folder / f"{t.task}_chat.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        out.append(path)
    return out


def _rows(run_dir: Path, task: str) -> dict[int, dict[str, Any]]:
    out = {}
    for line in (run_dir / "predictions" / f"{task}.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[int(r["doc_id"])] = r
    return out


def compare(
    tasks: list[TaskConfig], lme: dict[str, Any], run_dir: Path, results: list[dict[str, Any]]
) -> dict[str, Any]:
    """Every per-sample log-likelihood, prompt and aggregate, side by side."""
    report: dict[str, Any] = {"tasks": {}, "ok": True}
    ours_agg = {r["task"]: r["metrics"] for r in results}
    for t in tasks:
        name = f"lmm_{t.task}"
        rows = _rows(run_dir, t.task)
        max_ll = 0.0
        n_ll = 0
        prompt_mismatch = 0
        text_mismatch = 0
        for s in lme["samples"][name]:
            ours = rows[int(s["doc_id"])]
            if t.kind == "generate":
                if s["arguments"][0][0] != ours["prompt"]:
                    prompt_mismatch += 1
                if s["resps"][0][0] != ours["output"]:
                    text_mismatch += 1
                continue
            if t.kind == "multiple_choice":
                theirs = [float(r[0][0]) for r in s["resps"]]
                mine = ours["loglikelihoods"]
                if s["arguments"][0][0] != ours["prompt"]:
                    prompt_mismatch += 1
            else:
                theirs = [float(s["resps"][0][0])]
                mine = [ours["loglikelihood"]]
            for a, b in zip(mine, theirs, strict=True):
                max_ll = max(max_ll, abs(a - b))
                n_ll += 1
        aggs = {}
        for metric, value in lme["results"][name].items():
            base, _, _flt = metric.partition(",")
            is_err = base.endswith("_stderr")
            key = base[: -len("_stderr")] if is_err else base
            if key not in ours_agg[t.task] or (is_err and key in _LOWER_BETTER):
                continue  # bootstrap stderrs are random in both tools: not compared
            mine_v = ours_agg[t.task][key]["stderr" if is_err else "value"]
            if mine_v is None or (isinstance(value, str)):
                continue
            diff = abs(float(mine_v) - float(value))
            rel = key in _LOWER_BETTER and not is_err
            err = diff / abs(float(value)) if rel and value else diff
            aggs[base] = {"lmmbench": mine_v, "lm_eval": value, "abs_diff": diff, "rel": rel, "ok": err <= TOL}
        ok = max_ll <= TOL and prompt_mismatch == 0 and text_mismatch == 0 and all(a["ok"] for a in aggs.values())
        report["ok"] = report["ok"] and ok
        report["tasks"][t.task] = {
            "samples": len(lme["samples"][name]),
            "loglikelihoods_compared": n_ll,
            "max_abs_ll_diff": max_ll,
            "prompt_mismatches": prompt_mismatch,
            "generated_text_mismatches": text_mismatch,
            "aggregates": aggs,
            "ok": ok,
        }
    return report


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter_ns()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"command failed: {' '.join(cmd)}")
    return (time.perf_counter_ns() - t0) / 1e9


def throughput(args: argparse.Namespace, model_dir: Path, work: Path) -> dict[str, Any]:
    """Fresh-process wall time of both tools on the same tasks, alternating, medians."""
    tasks = [resolve_task(n) for n in args.throughput_tasks.split(",")]
    tdir = work / "tp_tasks"
    tdir.mkdir(parents=True, exist_ok=True)
    for t in tasks:
        (tdir / f"lmm_{t.task}.yaml").write_text(yaml.safe_dump(lm_eval_task_yaml(t), sort_keys=False))
    spec = work / "tp_spec.json"
    spec.write_text(
        json.dumps(
            {
                "model_dir": str(model_dir),
                "tasks_dir": str(tdir),
                "tasks": [f"lmm_{t.task}" for t in tasks],
                "batch_size": 1,
            }
        )
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_DATASETS_CACHE=str(work / "hf_datasets"))
    lmm_cmd = [
        str(Path(sys.executable).parent / "lmmbench"),
        "eval",
        "--model",
        str(model_dir),
        "--tasks",
        args.throughput_tasks,
        "--out-dir",
        str(work / "tp_runs"),
        "--batch-size",
        str(args.batch_size),
    ]
    lme_cmd = [args.lm_eval_python, str(HERE / "lmeval_side.py"), str(spec), str(work / "tp_lm_eval.json")]
    lmm_t, lme_t, lme_inner = [], [], []
    for _ in range(args.repeats):
        lmm_t.append(_timed(lmm_cmd, env))
        lme_t.append(_timed(lme_cmd, env))
        lme_inner.append(json.loads((work / "tp_lm_eval.json").read_text())["evaluate_s"])
    # lmmbench in this (warm) process, model load included, imports excluded
    inproc = []
    for _ in range(args.repeats):
        t0 = time.perf_counter_ns()
        run_eval(
            EvalConfig(
                model=str(model_dir),
                tasks=args.throughput_tasks.split(","),
                out_dir=work / "tp_inproc",
                batch_size=args.batch_size,
            ),
            show_progress=False,
        )
        inproc.append((time.perf_counter_ns() - t0) / 1e9)
    lmm, lme = statistics.median(lmm_t), statistics.median(lme_t)
    last_run = sorted((work / "tp_runs").iterdir())[-1]
    results = [json.loads((last_run / "results" / f"{t.task}.json").read_text()) for t in tasks]
    same = compare(tasks, json.loads((work / "tp_lm_eval.json").read_text()), last_run, results)
    return {
        "identical_numbers": same,
        "tasks": args.throughput_tasks,
        "repeats": args.repeats,
        "lmmbench_process_s": lmm_t,
        "lm_eval_process_s": lme_t,
        "lmmbench_median_s": lmm,
        "lm_eval_median_s": lme,
        "speedup_end_to_end": lme / lmm,
        "lm_eval_evaluate_only_median_s": statistics.median(lme_inner),
        "lmmbench_in_process_median_s": statistics.median(inproc),
        "speedup_excluding_imports": statistics.median(lme_inner) / statistics.median(inproc),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lm-eval-python", required=True, help="python of a virtualenv with lm-eval[hf]")
    ap.add_argument("--model", default="tiny-llm", help="tiny model name or local model dir")
    ap.add_argument("--tasks", default="sample_mc,sample_ppl", help="tasks for the numeric cross-check")
    ap.add_argument("--chat-tasks", default="sample_mc,sample_qa", help="also checked with the chat template")
    ap.add_argument("--throughput-tasks", default="sample_mc,sample_qa,sample_ppl")
    ap.add_argument("--batch-size", type=int, default=16, help="lmmbench batch size (equal-length batches)")
    ap.add_argument("--repeats", type=int, default=3, help="throughput repeats (0: skip throughput)")
    ap.add_argument("--out", type=Path, default=Path("outputs/eval_crosscheck"))
    ap.add_argument("--threads", type=int, default=1, help="torch threads for BOTH tools (OMP_NUM_THREADS)")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    model_dir = resolve_model(args.model).path
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tasks = [resolve_task(n) for n in args.tasks.split(",")]
        chat_paths = chat_copies([n for n in args.chat_tasks.split(",") if n], work)
        chat_tasks = [resolve_task(str(p)) for p in chat_paths]
        lme = run_lm_eval(args.lm_eval_python, model_dir, tasks, work)
        cfg = EvalConfig(
            model=str(model_dir),
            tasks=[*args.tasks.split(","), *map(str, chat_paths)],
            out_dir=work / "runs",
            batch_size=args.batch_size,
        )
        run = run_eval(cfg, show_progress=False)
        report = compare(tasks, lme, run.run_dir, run.results)
        if chat_tasks:
            lme_chat = run_lm_eval(args.lm_eval_python, model_dir, chat_tasks, work, chat=True)
            chat_report = compare(chat_tasks, lme_chat, run.run_dir, run.results)
            report["tasks"].update(chat_report["tasks"])
            report["ok"] = report["ok"] and chat_report["ok"]
        report.update(
            threads=args.threads,
            model=str(model_dir),
            lm_eval_version=lme.get("lm_eval_version"),
            lmmbench_batch_size=args.batch_size,
            lm_eval_batch_size=1,
            tolerance=TOL,
        )
        if args.repeats > 0:
            report["throughput"] = throughput(args, model_dir, work)
    (args.out / "crosscheck.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    for name, t in report["tasks"].items():
        print(
            f"{name}: {t['samples']} samples, {t['loglikelihoods_compared']} log-likelihoods, "
            f"max |diff| {t['max_abs_ll_diff']:.3g}, "
            f"prompt mismatches {t['prompt_mismatches']} -> {'OK' if t['ok'] else 'DIFFERENT'}"
        )
        for m, a in t["aggregates"].items():
            print(
                f"    {m:28s} lmmbench {a['lmmbench']!r:>24}  lm-eval {a['lm_eval']!r:>24}  "
                f"|diff| {a['abs_diff']:.3g}{' (rel)' if a['rel'] else ''}"
            )
    if "throughput" in report:
        tp = report["throughput"]
        print(
            f"throughput ({tp['tasks']}, {tp['repeats']} runs, medians): lmmbench {tp['lmmbench_median_s']:.2f} s, "
            f"lm-eval {tp['lm_eval_median_s']:.2f} s -> {tp['speedup_end_to_end']:.1f}x end to end; "
            f"excluding imports {tp['lmmbench_in_process_median_s']:.2f} s "
            f"vs {tp['lm_eval_evaluate_only_median_s']:.2f} s "
            f"-> {tp['speedup_excluding_imports']:.1f}x"
        )
    print(f"report: {args.out / 'crosscheck.json'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
