"""lmmbench's nine lmms-eval benchmarks against lmms-eval 0.7.3 itself, on the same data and server.

Two parts (docs/benchmarks.md, "lmms-eval cross-check"):

``metrics``  (run with lmms-eval's venv python, ``PYTHONPATH=src``): lmms-eval's own task functions
    (``process_results``, filters, metric and aggregation functions, imported from its task folders)
    score the scripted answers of ``lmmbench.testing.mm_datasets`` on the synthetic data read back from
    the ``datasets`` cache; the values go to ``tests/eval/data/lmms_eval_expected.json`` with versions.
``endpoint`` (run with lmmbench's python): one scripted OpenAI-compatible server per tool, lmms-eval's
    CLI (``--model openai``, its chat model) in its venv and ``lmmbench eval`` against them, on the same
    ``HF_HOME``; compares per task the requests (text and SHA-256 of every image / clip), and the scores.

    /tmp/lmms-venv/bin/python benchmarks/lmms_eval_crosscheck.py metrics --hf-home /tmp/xc/hf
    python benchmarks/lmms_eval_crosscheck.py endpoint --lmms-python /tmp/lmms-venv/bin/python --work /tmp/xc
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
EXPECTED = ROOT / "tests" / "eval" / "data" / "lmms_eval_expected.json"
TASKS = ["mmmu_val", "chartqa", "docvqa_val", "textvqa_val", "ai2d", "scienceqa_img", "mme",
         "librispeech_test_clean", "videomme"]  # fmt: skip
LAYOUT = {
    "mmmu_val": ("lmms-lab-encoder/MMMU", None, "validation"),
    "chartqa": ("lmms-lab-encoder/ChartQA", None, "test"),
    "docvqa_val": ("lmms-lab-encoder/DocVQA", "DocVQA", "validation"),
    "textvqa_val": ("lmms-lab-encoder/textvqa", None, "validation"),
    "ai2d": ("lmms-lab-encoder/ai2d", None, "test"),
    "scienceqa_img": ("lmms-lab-encoder/ScienceQA", "ScienceQA-IMG", "test"),
    "mme": ("lmms-lab-encoder/MME", None, "test"),
    "librispeech_test_clean": ("lmms-lab-audio/librispeech", "librispeech_test_clean", "librispeech_test_clean"),
    "videomme": ("lmms-eval/Video-MME", None, "test"),
}  # fmt: skip


def _offline(hf_home: Path) -> None:
    os.environ.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")


def _docs(task: str) -> list[dict[str, Any]]:
    import datasets

    path, name, split = LAYOUT[task]
    ds = datasets.load_dataset(path, name, split=split)
    if "audio" in ds.features:  # decoding audio needs torchcodec; lmms-eval's scoring reads only the text fields
        ds = ds.cast_column("audio", datasets.Audio(decode=False))
    return [dict(r) for r in ds]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def lmms_scores(task: str, docs: list[dict[str, Any]], answers: list[str]) -> tuple[dict[str, float], list[Any]]:
    """lmms-eval's numbers for ``answers`` (stripped, as lmms-eval strips generations), with its functions."""
    answers = [a.strip() for a in answers]
    if task == "mmmu_val":
        from lmms_eval.tasks.mmmu import utils as u

        per = [u.mmmu_process_results(d, [a]) for d, a in zip(docs, answers, strict=True)]
        return {"mmmu_acc": u.mmmu_aggregate_results([p["mmmu_acc"] for p in per])}, [p["mmmu_acc"] for p in per]
    if task == "chartqa":
        from lmms_eval.tasks.chartqa import utils as u

        per = [u.chartqa_process_results(d, [a]) for d, a in zip(docs, answers, strict=True)]
        keys = ("relaxed_overall", "relaxed_human_split", "relaxed_augmented_split")
        return {k: _mean([p[k] for p in per if k in p]) for k in keys}, per
    if task == "docvqa_val":
        from lmms_eval.api.metrics import anls

        per = [anls(d["answers"], [a])["anls"] for d, a in zip(docs, answers, strict=True)]
        return {"anls": _mean(per)}, per
    if task == "textvqa_val":
        from lmms_eval.tasks.textvqa import utils as u

        per = [u.textvqa_process_results(dict(d), [a])["exact_match"] for d, a in zip(docs, answers, strict=True)]
        return {"exact_match": _mean(per)}, per
    if task == "ai2d":
        from lmms_eval.api.metrics import exact_match_hf_evaluate
        from lmms_eval.tasks.ai2d import utils as u

        filt = u.MultiChoiceRegexFilter(regex_pattern=r"([A-Z])\.", group_select=0, ignore_case=True,
                                        ignore_punctuation=True)  # fmt: skip
        picked = filt.apply([[a] for a in answers], docs)
        per = [float(exact_match_hf_evaluate([p.strip()], [u.ai2d_doc_to_target(d, "mcq")], ignore_case=True,
                                             ignore_punctuation=True)["exact_match"])
               for p, d in zip(picked, docs, strict=True)]  # fmt: skip
        return {"exact_match": _mean(per)}, list(zip(picked, per, strict=True))
    if task == "scienceqa_img":
        from lmms_eval.tasks.scienceqa import utils as u

        per = [u.sqa_process_results(d, [a])["exact_match"] for d, a in zip(docs, answers, strict=True)]
        return {"exact_match": _mean(per)}, per
    if task == "mme":
        from lmms_eval.tasks.mme import utils as u

        per = [u.mme_process_results(d, [a]) for d, a in zip(docs, answers, strict=True)]
        by: dict[str, list[Any]] = defaultdict(list)
        for p in per:
            for k, v in p.items():
                by[k].append(v)
        return {k: u.mme_aggregate_results(v) for k, v in by.items()}, per
    if task == "librispeech_test_clean":
        from lmms_eval.tasks.librispeech import utils as u

        per = [u.librispeech_process_result(d, [a])["wer"] for d, a in zip(docs, answers, strict=True)]
        return {"wer": u.librispeech_wer(per, None)}, per
    from lmms_eval.tasks.videomme import utils as u

    per = [u.videomme_process_results(d, [a])["videomme_perception_score"] for d, a in zip(docs, answers, strict=True)]
    return {"videomme_perception_score": u.videomme_aggregate_results(per)}, per


def cmd_metrics(args: argparse.Namespace) -> None:
    """Part 1: lmms-eval's functions on the scripted answers -> the expected-values file."""
    from importlib.metadata import version

    from lmmbench.testing import mm_datasets

    _offline(args.hf_home)
    mm_datasets.write_all(args.hf_home)
    out: dict[str, Any] = {
        "what": "lmms-eval 0.7.3's own task functions on lmmbench.testing.mm_datasets' scripted answers",
        "command": "benchmarks/lmms_eval_crosscheck.py metrics (lmms-eval's venv)",
        "versions": {p: version(p) for p in ("lmms_eval", "datasets", "transformers", "numpy", "pillow")},
        "python": platform.python_version(), "tasks": {}, "per_sample": {},
    }  # fmt: skip
    for task in TASKS:
        agg, per = lmms_scores(task, _docs(task), mm_datasets.SCRIPTED[task])
        out["tasks"][task] = agg
        out["per_sample"][task] = json.loads(json.dumps(per, default=str))
        print(task, agg, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


def _requests(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def _key(r: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    return ("\n".join(r["texts"]), tuple(m["sha256"] for m in r["media"]))


def _compare_requests(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """Requests matched by scripted answer rule: same text, same media hashes, same layout, same max_tokens."""
    a, b = Counter(_key(r) for r in ours), Counter(_key(r) for r in theirs)
    diffs = []
    for r in ours:
        if _key(r) in b:
            continue
        twin = next((t for t in theirs if t["answer"] == r["answer"] and (set(t["texts"]) & set(r["texts"]) or
                     {m["sha256"] for m in t["media"]} & {m["sha256"] for m in r["media"]})), None)  # fmt: skip
        diffs.append({"lmmbench": {"texts": r["texts"], "media": len(r["media"]), "layout": r["layout"]},
                      "lmms_eval": None if twin is None else {"texts": twin["texts"], "media": len(twin["media"]),
                                                              "layout": twin["layout"]}})  # fmt: skip
    return {"lmmbench_requests": sum(a.values()), "lmms_eval_requests": sum(b.values()),
            "equal": sum((a & b).values()), "differences": diffs[:3]}  # fmt: skip


def _lmms_eval_results(out_dir: Path) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for f in sorted(out_dir.rglob("*results*.json")):
        data = json.loads(f.read_text())
        for task, vals in (data.get("results") or {}).items():
            found[task] = {k.split(",")[0]: v for k, v in vals.items() if isinstance(v, (int, float))
                           and "stderr" not in k and k != "alias"}  # fmt: skip
    return found


def cmd_endpoint(args: argparse.Namespace) -> None:
    """Part 2: both tools against scripted servers on the same data; requests and scores compared."""
    from lmmbench.evaluation.eval_config import EvalConfig
    from lmmbench.evaluation.modes import run_eval
    from lmmbench.testing import mm_datasets
    from lmmbench.testing.scripted_server import ScriptedServer

    work = args.work
    hf = work / "hf"
    _offline(hf)
    os.environ.setdefault("LMMBENCH_HOME", str(work / "home"))
    mm_datasets.write_all(hf)
    tasks = args.tasks.split(",")
    report: dict[str, Any] = {"tasks": {}}
    for rec in ("ours.jsonl", "theirs.jsonl"):
        (work / rec).unlink(missing_ok=True)
    with ScriptedServer(mm_datasets.rules(), "zzz", record_path=work / "ours.jsonl") as ours, \
            ScriptedServer(mm_datasets.rules(), "zzz", record_path=work / "theirs.jsonl") as theirs:  # fmt: skip
        t0 = time.perf_counter()
        run = run_eval(EvalConfig(model=ours.url.removesuffix("/v1"), tasks=tasks, tokenizer="tiny-vl",
                                  out_dir=work / "lmmbench_out"), show_progress=False)  # fmt: skip
        report["lmmbench_s"] = round(time.perf_counter() - t0, 2)
        env = dict(os.environ, OPENAI_API_KEY="none", HF_HOME=str(hf))
        lmms_tasks = [t for t in tasks if t not in args.skip_lmms.split(",")]
        cmd = [str(args.lmms_python), "-m", "lmms_eval", "--model", "openai", "--model_args",
               f"model_version=scripted,base_url={theirs.url},num_concurrent=1,max_retries=1",
               "--tasks", ",".join(lmms_tasks), "--batch_size", "1", "--output_path", str(work / "lmms_out"),
               "--log_samples"]  # fmt: skip
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        report["lmms_eval_s"] = round(time.perf_counter() - t0, 2)
        report["lmms_eval_rc"] = proc.returncode
        report["lmms_eval_tail"] = (proc.stdout + proc.stderr)[-3000:]
    ours_req, theirs_req = _requests(work / "ours.jsonl"), _requests(work / "theirs.jsonl")
    theirs_scores = _lmms_eval_results(work / "lmms_out")
    expected = json.loads(EXPECTED.read_text())["tasks"] if EXPECTED.is_file() else {}
    for r in run.results:
        task = r["task"]
        report["tasks"][task] = {
            "lmmbench": {k: v["value"] for k, v in r["metrics"].items()},
            "lmms_eval_cli": theirs_scores.get(task),
            "lmms_eval_functions": expected.get(task),
        }
    report["requests"] = _compare_requests(ours_req, theirs_req)
    (work / "crosscheck.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(json.dumps(report, indent=1, default=str))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("metrics")
    m.add_argument("--hf-home", type=Path, required=True)
    m.add_argument("--out", type=Path, default=EXPECTED)
    e = sub.add_parser("endpoint")
    e.add_argument("--lmms-python", type=Path, required=True)
    e.add_argument("--work", type=Path, required=True)
    e.add_argument("--tasks", default=",".join(TASKS))
    e.add_argument("--skip-lmms", default="", help="tasks not run through lmms-eval's CLI")
    e.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    cmd_metrics(args) if args.cmd == "metrics" else cmd_endpoint(args)


if __name__ == "__main__":
    main()
