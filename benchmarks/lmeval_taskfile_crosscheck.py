"""Cross-check lm-evaluation-harness task files run by `lmmbench eval` against lm-eval itself.

    .venv/bin/python benchmarks/lmeval_taskfile_crosscheck.py --lm-eval-python /tmp/lmeval/bin/python \
        [--model tiny-llm] [--threads 1] [--write-reference]

The task files in ``tests/eval/lmeval_tasks/`` are lm-eval's format (multiple choice with and without
a few-shot split, ``include`` + ``first_n``, loglikelihood, loglikelihood_rolling from a local
folder, generate_until with two filter pipelines, a group). Both tools read the SAME files: lm-eval
(in its own virtualenv, through ``benchmarks/lmeval_side.py``, batch size 1, float32, CPU) with
``--include_path`` and lmmbench with ``--include-path``, with the same torch thread count. Compared:
every prompt, every per-sample log-likelihood and greedy flag, every generated text and filtered
answer, every task and group aggregate and the standard errors that are not bootstrapped, within
1e-6 (relative for perplexities). ``--write-reference`` stores lm-eval's side as
``tests/eval/lmeval_tasks/lm_eval_reference.json``, which the CI test compares against without lm-eval.
Exit code 1 when anything differs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from lmmbench.evaluation import EvalConfig, run_eval
from lmmbench.evaluation.lmeval.compare import compare_run, reference_from_lmeval
from lmmbench.evaluation.task_registry import resolve_selection
from lmmbench.models import resolve_model

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TASKS_DIR = ROOT / "tests" / "eval" / "lmeval_tasks"
TASKS = ["lmm_group", "lmm_mc_include", "lmm_lastword", "lmm_ppl", "lmm_gen"]
GROUPS = ["lmm_group"]


def run_lm_eval(py: str, model_dir: Path, work: Path, threads: int) -> dict[str, Any]:
    """lm-eval on the task files, in its own interpreter; its JSON answer."""
    spec = {
        "model_dir": str(model_dir),
        "tasks_dir": str(TASKS_DIR),
        "tasks": TASKS,
        "batch_size": 1,
        "bootstrap_iters": 100,
        "cwd": str(TASKS_DIR),
    }
    (work / "spec.json").write_text(json.dumps(spec))
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_DATASETS_CACHE=str(work / "hf_datasets"),
        OMP_NUM_THREADS=str(threads),
    )
    proc = subprocess.run(
        [py, str(HERE / "lmeval_side.py"), str(work / "spec.json"), str(work / "out.json")],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"lm-eval failed (exit {proc.returncode})")
    result: dict[str, Any] = json.loads((work / "out.json").read_text())
    return result


def _print(report: dict[str, Any]) -> None:
    for name, t in report["tasks"].items():
        print(
            f"{name}: {t['samples']} samples, {t['loglikelihoods']} log-likelihoods, max |diff| "
            f"{t['max_abs_ll_diff']:.3g}, mismatches {len(t['mismatches'])} -> {'OK' if t['ok'] else 'DIFFERENT'}"
        )
        for m in t["mismatches"][:5]:
            print(f"    {m}")
        for key, a in t["aggregates"].items():
            print(f"    {key:34s} lmmbench {a['lmmbench']!r:>24}  lm-eval {a['lm_eval']!r:>24}")
    for name, g in report["groups"].items():
        print(f"{name} (group) -> {'OK' if g['ok'] else 'DIFFERENT'}")
        for key, a in g["aggregates"].items():
            print(f"    {key:34s} lmmbench {a['lmmbench']!r:>24}  lm-eval {a['lm_eval']!r:>24}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lm-eval-python", required=True, help="python of a virtualenv with lm-eval[hf]")
    ap.add_argument("--model", default="tiny-llm", help="tiny model name or local model dir")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for BOTH tools")
    ap.add_argument("--write-reference", action="store_true", help="store lm-eval's side for the CI test")
    ap.add_argument("--out", type=Path, default=Path("outputs/lmeval_taskfile_crosscheck"))
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    model_dir = resolve_model(args.model).path
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lme = run_lm_eval(args.lm_eval_python, model_dir, work, args.threads)
        reference = reference_from_lmeval(lme, GROUPS)
        reference.update(
            model=args.model,
            threads=args.threads,
            torch=torch.__version__,
            batch_size=1,
            dtype="float32",
            created=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            machine=f"{platform.machine()} {platform.processor() or ''}".strip(),
        )
        cfg = EvalConfig(
            model=str(model_dir),
            tasks=TASKS,
            include_path=[TASKS_DIR],
            out_dir=work / "runs",
            batch_size=1,
            threads=args.threads,
        )
        run = run_eval(cfg, show_progress=False)
        tasks = resolve_selection(TASKS, [TASKS_DIR]).tasks
        report = compare_run(reference, tasks, run.run_dir, run.results)
    report.update(lm_eval_version=lme.get("lm_eval_version"), model=args.model, threads=args.threads)
    (args.out / "crosscheck.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    _print(report)
    if args.write_reference:
        ref_path = TASKS_DIR / "lm_eval_reference.json"
        ref_path.write_text(json.dumps(reference, indent=1, sort_keys=True) + "\n")
        print(f"reference written: {ref_path}")
    print(f"report: {args.out / 'crosscheck.json'} -> {'IDENTICAL' if report['ok'] else 'DIFFERENT'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
