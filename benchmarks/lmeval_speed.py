"""lmmbench eval vs `lm_eval --model hf` end to end, side by side, on lm-eval's catalogue tasks.

    PYTHONPATH=src python benchmarks/lmeval_speed.py --model-dir DIR [--threads 8] [--repeats 3] \
        [--batch-sizes 1,4,8,16] [--lmmbench-batch-size 16] [--lmmbench-runs-per-round 1] [--limit 20] \
        [--out lmeval_speed.json]

DIR is a model folder, e.g. ``lmmbench models build shape:qwen2.5-7b --num-layers 2 --out DIR`` (Qwen2.5-7B's
widths and 152k vocabulary, two layers, random weights). Data: synthetic rows in each data set's real schema
written into a fresh `datasets` Arrow cache (``lmmbench.testing.lmeval_rows``), read offline by both sides.
Each measurement is a fresh process (``lmmbench eval`` or ``python -m lm_eval``): nothing is cached on either
side. Both run on CPU in float32 with the same thread count (``--threads`` for lmmbench, OMP / MKL thread
variables for both). The sides are interleaved, in a rotated order per repeat, so that a noisy machine loads
them alike. Reported: median wall time per side with min / max, lm-eval's best batch size, the ratio, and the
numbers: every per-sample log-likelihood of lmmbench against lm-eval at batch size 1 (max relative difference)
and every accuracy of every task and group.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def write_data(hf_home: Path, limit: int) -> None:
    """The three tasks' data sets in the `datasets` cache under ``hf_home``."""
    from lmmbench.testing.hf_datasets import write_dataset_cache
    from lmmbench.testing.lmeval_rows import arc_hellaswag_mmlu_rows

    for (repo, config), splits in arc_hellaswag_mmlu_rows(limit).items():
        write_dataset_cache(hf_home, repo, config, splits)


def _env(hf_home: Path, threads: int) -> dict[str, str]:
    env = dict(os.environ, HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               TQDM_DISABLE="1")  # fmt: skip
    env.pop("HF_DATASETS_CACHE", None)
    return env


def run_side(side: str, args: argparse.Namespace, hf_home: Path, work: Path) -> dict[str, Any]:
    """One end-to-end run of one side in a fresh process; its wall time and where its samples are."""
    out = work / f"{side}-{time.time_ns()}"
    if side == "lmmbench":
        cmd = [sys.executable, "-m", "lmmbench.cli.main", "eval", "--model", str(args.model_dir), "--tasks",
               args.tasks, "--limit", str(args.limit), "--threads", str(args.threads), "--batch-size",
               str(args.lmmbench_batch_size), "--device", "cpu", "--out-dir", str(out),
               "--allow-random-weights"]  # fmt: skip
        cmd += ["--pad-batches"] if args.pad_batches else []
    else:
        bs = side.removeprefix("lm_eval-bs")
        cmd = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args",
               f"pretrained={args.model_dir},dtype=float32", "--device", "cpu", "--batch_size", bs, "--tasks",
               args.tasks, "--limit", str(args.limit), "--output_path", str(out), "--log_samples"]  # fmt: skip
    t0 = time.perf_counter_ns()
    proc = subprocess.run(cmd, env=_env(hf_home, args.threads), capture_output=True, text=True, check=False)
    wall_s = (time.perf_counter_ns() - t0) / 1e9
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"{side} failed (exit {proc.returncode})")
    print(f"{side}: {wall_s:.1f} s", file=sys.stderr, flush=True)
    return {"side": side, "wall_s": wall_s, "out": str(out)}


def samples_of(side: str, out: Path) -> tuple[dict[str, dict[int, list[float]]], dict[str, dict[str, float]]]:
    """Per task: doc_id -> log-likelihoods; per task / group: metric -> value."""
    lls: dict[str, dict[int, list[float]]] = {}
    if side == "lmmbench":
        run = next(out.glob("*/run.json")).parent
        for f in (run / "predictions").glob("*.jsonl"):
            rows = [json.loads(x) for x in f.read_text().splitlines()]
            lls[f.stem] = {r["doc_id"]: [float(x[0][0]) for x in r["resps"]] for r in rows}
        metrics = {}
        for f in (run / "results").glob("*.json"):
            data = json.loads(f.read_text())
            metrics[data["task"]] = {k: v["value"] for k, v in data["metrics"].items()}
        return lls, metrics
    for f in out.glob("**/samples_*.jsonl"):
        task = f.name.removeprefix("samples_").rsplit("_", 1)[0]
        rows = [json.loads(x) for x in f.read_text().splitlines()]
        lls[task] = {r["doc_id"]: [float(x[0][0]) for x in r["resps"]] for r in rows}
    result = json.loads(next(out.glob("**/results_*.json")).read_text())["results"]
    metrics = {t: {k.split(",")[0]: v for k, v in row.items() if "," in k and "stderr" not in k
                   and isinstance(v, (int, float))} for t, row in result.items()}  # fmt: skip
    return lls, metrics


def compare(ours: Path, theirs: Path, side: str) -> dict[str, Any]:
    """lmmbench's numbers against one lm-eval run: max relative LL difference, accuracies that differ."""
    a_ll, a_m = samples_of("lmmbench", ours)
    b_ll, b_m = samples_of(side, theirs)
    worst, n = 0.0, 0
    for task, docs in b_ll.items():
        for doc, values in docs.items():
            for x, y in zip(a_ll[task][doc], values, strict=True):
                worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1.0))
                n += 1
    differ = [f"{t}:{m} {a_m.get(t, {}).get(m)} != {v}" for t, row in b_m.items() for m, v in row.items()
              if m in ("acc", "acc_norm") and abs(float(a_m.get(t, {}).get(m, float("nan"))) - float(v)) > 1e-9]
    return {"against": side, "loglikelihoods": n, "max_rel_diff": worst, "metrics_differ": differ}


def scoring_only(args: argparse.Namespace, hf_home: Path) -> dict[str, Any]:
    """The model calls alone, in this process, on one loaded model: lm-eval builds the three tasks' instances
    once; lm-eval's HFLM (each batch size) and lmmbench's adapter over its in-process scorer answer the same
    log-likelihood instances, interleaved, ``--repeats`` times. What end to end adds on both sides (imports,
    lm-eval's task index, data, model load) is the same lm-eval and transformers code."""
    import torch

    torch.set_num_threads(args.threads)
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from lmmbench.backends.scoring import InProcessScorer
    from lmmbench.evaluation.lmeval.catalogue import make_lm
    from lmmbench.models import load_model

    loaded = load_model(str(args.model_dir), device="cpu", dtype="float32")
    tasks = TaskManager().load(args.tasks.split(","))["tasks"]
    instances = []
    for task in tasks.values():
        task.build_all_requests(limit=args.limit, rank=0, world_size=1)
        instances.extend(task.instances)
    print(f"{len(instances)} log-likelihood instances", file=sys.stderr, flush=True)
    scorer = InProcessScorer(loaded, batch_size=args.lmmbench_batch_size, pad_batches=args.pad_batches)
    sides: dict[str, Any] = {"lmmbench": make_lm(scorer)}
    for b in args.batch_sizes.split(","):
        sides[f"lm_eval-bs{b}"] = HFLM(pretrained=loaded.model, tokenizer=loaded.tokenizer, batch_size=int(b),
                                       device="cpu")  # fmt: skip
    runs: list[dict[str, Any]] = []
    values: dict[str, list[float]] = {}
    names = list(sides)
    if args.warmup:  # one untimed pass: the first pass of a process also reads the weights in from disk
        sides[names[-1]].loglikelihood(instances, disable_tqdm=True)
    for rep in range(args.repeats):
        for side in names[rep % len(names):] + names[: rep % len(names)]:
            t0 = time.perf_counter_ns()
            out = sides[side].loglikelihood(instances, disable_tqdm=True)
            runs.append({"side": side, "wall_s": (time.perf_counter_ns() - t0) / 1e9, "repeat": rep})
            values[side] = [float(x[0]) for x in out]
            print(f"{side}: {runs[-1]['wall_s']:.1f} s", file=sys.stderr, flush=True)
            _write(args, runs, None)
    checks = []
    for side in names[1:]:
        worst = max(abs(a - b) / max(abs(a), abs(b), 1.0) for a, b in zip(values["lmmbench"], values[side],
                                                                           strict=True))  # fmt: skip
        checks.append({"against": side, "loglikelihoods": len(values[side]), "max_rel_diff": worst})
    _write(args, runs, checks)
    return summary(runs, checks)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", type=Path, required=True)
    p.add_argument("--tasks", default="arc_easy,hellaswag,mmlu_stem")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-sizes", default="1,4,8,16")
    p.add_argument("--lmmbench-batch-size", type=int, default=16)
    p.add_argument("--lmmbench-runs-per-round", type=int, default=1,
                   help="run lmmbench this many times per round, between the lm-eval sides (a spread for the "
                        "fast side when each lm-eval side takes long)")
    p.add_argument("--out", type=Path, default=Path("lmeval_speed.json"))
    p.add_argument("--pad-batches", action="store_true", help="lmmbench right-pads mixed lengths (as lm-eval)")
    p.add_argument("--warmup", action="store_true", help="scoring only: one untimed pass before the timed ones")
    p.add_argument("--scoring-only", action="store_true", help="time the model calls alone, in one process")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="lmeval_speed_"))
    hf_home = work / "hf"
    if args.scoring_only:  # `datasets` reads HF_HOME when first imported
        os.environ.update(_env(hf_home, args.threads))
    write_data(hf_home, max(args.limit, 1))
    if args.scoring_only:
        print(json.dumps(scoring_only(args, hf_home), indent=1))
        return 0
    sides = ["lmmbench"] + [f"lm_eval-bs{b}" for b in args.batch_sizes.split(",")]
    runs: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        for side in round_order(sides, rep, args.lmmbench_runs_per_round):
            runs.append({**run_side(side, args, hf_home, work), "repeat": rep})
            _write(args, runs, None)
    first = {r["side"]: Path(r["out"]) for r in reversed(runs)}
    checks = [compare(first["lmmbench"], first[s], s) for s in sides[1:]]
    _write(args, runs, checks)
    print(json.dumps(summary(runs, checks), indent=1))
    return 0


def round_order(sides: list[str], rep: int, lmmbench_runs: int) -> list[str]:
    """The sides of one round, rotated by the round; with ``lmmbench_runs`` > 1, lmmbench runs that many times,
    spread between the lm-eval sides (so its runs see the machine the peers saw)."""
    if lmmbench_runs <= 1:
        return sides[rep % len(sides) :] + sides[: rep % len(sides)]
    peers = sides[1:]
    order: list[str] = []
    for k, peer in enumerate(peers):
        order += (["lmmbench"] if k < lmmbench_runs else []) + [peer]
    return order + ["lmmbench"] * max(0, lmmbench_runs - len(peers))


def summary(runs: list[dict[str, Any]], checks: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Median / min / max wall time per side, the best lm-eval batch size, the ratio."""
    by: dict[str, list[float]] = {}
    for r in runs:
        by.setdefault(r["side"], []).append(r["wall_s"])
    med = {s: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v), "n": len(v)} for s, v in by.items()}
    peers = {s: m for s, m in med.items() if s != "lmmbench"}
    out: dict[str, Any] = {"sides": med}
    if peers and "lmmbench" in med:
        best = min(peers, key=lambda s: peers[s]["median_s"])
        out["best_lm_eval"] = best
        out["speedup_vs_best"] = peers[best]["median_s"] / med["lmmbench"]["median_s"]
    if checks is not None:
        out["numbers"] = checks
    return out


def _write(args: argparse.Namespace, runs: list[dict[str, Any]], checks: list[dict[str, Any]] | None) -> None:
    import importlib.metadata as md

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()
    cpu = next((x.split(":", 1)[1].strip() for x in lscpu if x.startswith("Model name")), "")
    versions = {}
    for pkg in ("torch", "transformers", "lm-eval", "datasets"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    data = {"mode": "scoring only" if args.scoring_only else "end to end",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "cpu": cpu, "cores": os.cpu_count(),
            "python": platform.python_version(), "versions": versions, "args": {k: str(v) for k, v in
            vars(args).items()}, "runs": runs, "summary": summary(runs, checks)}  # fmt: skip
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
