"""lmmbench's nine lmms-eval benchmarks against lmms-eval 0.7.3 itself, on the same data and server.

Two parts (docs/benchmarks.md, "lmms-eval cross-check"):

``metrics``  (run with lmms-eval's venv python, ``PYTHONPATH=src``): lmms-eval's own task functions
    (``process_results``, filters, metric and aggregation functions, imported from its task folders)
    score the scripted answers of ``lmmbench.testing.mm_datasets`` on the synthetic data read back from
    the ``datasets`` cache; the values go to ``tests/eval/data/lmms_eval_expected.json`` with versions.
``endpoint`` (run with lmmbench's python): one scripted OpenAI-compatible server per tool, lmms-eval's
    CLI (``--model openai``, its chat model) in its venv and ``lmmbench eval`` against them, on the same
    ``HF_HOME``; compares per task the requests (text and SHA-256 of every image / clip), and the scores.

``serve``    (lmmbench's python): both tools against one ``lmmbench serve --model tiny-vl`` (greedy), so the same
    requests must bring the same generations, parsed answers and scores.

    /tmp/lmms-venv/bin/python benchmarks/lmms_eval_crosscheck.py metrics --hf-home /tmp/xc/hf
    python benchmarks/lmms_eval_crosscheck.py endpoint --lmms-python /tmp/lmms-venv/bin/python --work /tmp/xc
    python benchmarks/lmms_eval_crosscheck.py serve --lmms-python /tmp/lmms-venv/bin/python --work /tmp/xc-serve
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


def _task_of(req: dict[str, Any], by_task: dict[str, list[tuple[str, str | None, str]]]) -> str | None:
    """The task a recorded request belongs to (its scripted rule: longest text needle, or the clip's hash)."""
    text = "\n".join(req["texts"])
    shas = {m["sha256"] for m in req["media"]}
    best: tuple[int, str] | None = None
    for task, rules in by_task.items():
        for needle, sha, _ in rules:
            if needle in text and (sha is None or sha in shas) and (best is None or len(needle) > best[0]):
                best = (len(needle), task)
    return best[1] if best else None


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return ("\n".join(r["texts"]), tuple(m["sha256"] for m in r["media"]), tuple(r["layout"]), r["max_tokens"])


def _compare_requests(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """Same text, same media (SHA-256, in order), same part layout, same max_tokens, as multisets."""
    a, b = Counter(_key(r) for r in ours), Counter(_key(r) for r in theirs)
    diffs = []
    for r in ours:
        if _key(r) not in b:
            twin = next((t for t in theirs if t["answer"] == r["answer"]), None)
            diffs.append({"lmmbench": {"texts": r["texts"], "media": len(r["media"]), "layout": r["layout"],
                                       "max_tokens": r["max_tokens"]},
                          "lmms_eval": twin and {"texts": twin["texts"], "media": len(twin["media"]),
                                                 "layout": twin["layout"], "max_tokens": twin["max_tokens"]}})
    def loose(r: dict[str, Any]) -> tuple[Any, ...]:
        return (*_key(r)[:2], _key(r)[3])

    la, lb = Counter(loose(r) for r in ours), Counter(loose(r) for r in theirs)
    return {"n": sum(a.values()), "n_lmms_eval": sum(b.values()), "equal": sum((a & b).values()),
            "equal_but_layout": sum((la & lb).values()), "differences": diffs[:2]}  # fmt: skip


def _lmms_eval_out(out_dir: Path) -> tuple[dict[str, dict[str, float]], dict[str, dict[int, dict[str, Any]]]]:
    """lmms-eval's aggregate results and its logged samples (by task, by doc id)."""
    found: dict[str, dict[str, float]] = {}
    samples: dict[str, dict[int, dict[str, Any]]] = {}
    for f in sorted(out_dir.rglob("*_results.json")):
        for task, vals in (json.loads(f.read_text()).get("results") or {}).items():
            found[task] = {k.split(",")[0]: v for k, v in vals.items()
                           if isinstance(v, (int, float)) and "stderr" not in k}  # fmt: skip
    for f in sorted(out_dir.rglob("*_samples_*.jsonl")):
        task = f.stem.split("_samples_", 1)[1]
        samples[task] = {int(x["doc_id"]): x for x in _requests(f)}
    return found, samples


# per task: (lmms-eval's per-sample key, what of it to compare; lmmbench's key in the "sample" column or "parsed")
PER_SAMPLE = {"chartqa": ("relaxed_overall", None, "relaxed_overall"), "docvqa_val": ("anls", None, "anls"),
              "textvqa_val": ("exact_match", None, "exact_match"), "ai2d": ("exact_match", None, "exact_match"),
              "scienceqa_img": ("exact_match", None, "exact_match"), "mme": ("*", "score", "score"),
              "mmmu_val": ("mmmu_acc", "parsed_pred", "parsed"), "videomme": ("*", "pred_answer", "parsed"),
              "librispeech_test_clean": ("wer", "pred", "parsed")}  # fmt: skip


def _norm(v: Any) -> Any:
    while isinstance(v, list) and len(v) == 1:
        v = v[0]  # lmms-eval keeps a list of parsed predictions (one per generation)
    if isinstance(v, list):
        return sorted(map(str, v))
    return round(float(v), 12) if isinstance(v, (int, float)) else str(v)


def _compare_samples(task: str, run_dir: Path, theirs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    import csv

    key, field, our_key = PER_SAMPLE[task]
    rows = list(csv.DictReader((run_dir / "results" / f"{task}_metrics.csv").open(encoding="utf-8")))
    same_resp = same_score = 0
    diffs = []
    for row in rows:
        t = theirs.get(int(row["doc_id"]))
        if t is None:
            continue
        resp = row["prediction"].strip() if task != "ai2d" else json.loads(row["parsed"])
        t_resp = t["filtered_resps"][0] if isinstance(t["filtered_resps"], list) else t["filtered_resps"]
        same_resp += resp == t_resp
        t_val = t.get(key) if key != "*" else next(v for k, v in t.items() if k.endswith("_score"))
        t_val = t_val.get(field) if field else t_val
        mine = json.loads(row["parsed"]) if our_key == "parsed" else json.loads(row["sample"])[our_key]
        if _norm(mine) == _norm(t_val):
            same_score += 1
        else:
            diffs.append({"doc_id": row["doc_id"], "lmmbench": mine, "lmms_eval": t_val})
    return {"n": len(rows), "responses_equal": same_resp, "per_sample_equal": same_score, "differences": diffs[:3]}


def _offline_work(args: argparse.Namespace) -> tuple[Path, list[str]]:
    """The work folder with the data sets written into its offline Hugging Face cache, and the tasks."""
    from lmmbench.testing import mm_datasets

    hf = args.work / "hf"
    _offline(hf)
    os.environ.setdefault("LMMBENCH_HOME", str(args.work / "home"))
    mm_datasets.write_all(hf)
    return args.work, args.tasks.split(",")


def cmd_endpoint(args: argparse.Namespace) -> None:
    """Part 2: both tools against scripted servers on the same data; requests, answers and scores compared."""
    from lmmbench.evaluation.eval_config import EvalConfig
    from lmmbench.evaluation.modes import run_eval
    from lmmbench.testing import mm_datasets
    from lmmbench.testing.scripted_server import ScriptedServer

    work, tasks = _offline_work(args)
    for rec in ("ours.jsonl", "theirs.jsonl"):
        (work / rec).unlink(missing_ok=True)
    report: dict[str, Any] = {"tasks": {}, "lmms_eval_runs": {}}
    with ScriptedServer(mm_datasets.rules(), "zzz", record_path=work / "ours.jsonl") as ours, \
            ScriptedServer(mm_datasets.rules(), "zzz", record_path=work / "theirs.jsonl") as theirs:  # fmt: skip
        t0 = time.perf_counter()
        run = run_eval(EvalConfig(model=ours.url.removesuffix("/v1"), tasks=tasks, tokenizer="tiny-vl",
                                  out_dir=work / "lmmbench_out"), show_progress=False)  # fmt: skip
        report["lmmbench_s"] = round(time.perf_counter() - t0, 2)
        env = dict(os.environ, OPENAI_API_KEY="none", HF_HOME=str(work / "hf"))
        for group in args.lmms_groups.split(";"):  # separate runs: a task lmms-eval cannot run fails alone
            todo = [t for t in group.split(",") if t in tasks]
            if not todo:
                continue
            simple = ["--force_simple"] if set(todo) <= set(args.lmms_simple.split(",")) else []
            cmd = [str(args.lmms_python), "-m", "lmms_eval", "--model", "openai", *simple, "--model_args",
                   f"model_version=scripted,base_url={theirs.url},num_concurrent=1,max_retries=1",
                   "--tasks", ",".join(todo), "--batch_size", "1", "--output_path", str(work / "lmms_out"),
                   "--log_samples"]  # fmt: skip
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
            tail = [x for x in (proc.stdout + proc.stderr).splitlines() if "Error" in x or "error" in x][-3:]
            model = " ".join(cmd[3 : 5 + len(simple)])
            report["lmms_eval_runs"][",".join(todo)] = {"rc": proc.returncode, "model": model,
                                                        "s": round(time.perf_counter() - t0, 2), "errors": tail}
    by_task = mm_datasets.rules_by_task()
    ours_req, theirs_req = _requests(work / "ours.jsonl"), _requests(work / "theirs.jsonl")
    theirs_scores, theirs_samples = _lmms_eval_out(work / "lmms_out")
    expected = json.loads(EXPECTED.read_text())["tasks"] if EXPECTED.is_file() else {}
    for r in run.results:
        task = r["task"]
        entry: dict[str, Any] = {
            "lmmbench": {k: v["value"] for k, v in r["metrics"].items()},
            "lmms_eval_cli": theirs_scores.get(task),
            "lmms_eval_functions": expected.get(task),
            "requests": _compare_requests([q for q in ours_req if _task_of(q, by_task) == task],
                                          [q for q in theirs_req if _task_of(q, by_task) == task]),
        }  # fmt: skip
        if task in theirs_samples:
            entry["samples"] = _compare_samples(task, run.run_dir, theirs_samples[task])
        report["tasks"][task] = entry
    (work / "crosscheck.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(json.dumps(report, indent=1, default=str))
    print(markdown(report))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cmd_serve(args: argparse.Namespace) -> None:
    """Part 3: both tools against one `lmmbench serve` (tiny-vl, greedy): same requests must give the same
    generations, parsed answers and scores."""
    import urllib.request

    from lmmbench.evaluation.eval_config import EvalConfig
    from lmmbench.evaluation.modes import run_eval

    work, tasks = _offline_work(args)
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "lmmbench.cli.main", "serve", "--model", args.model, "--port",
                               str(port), "--threads", "1"], env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    report: dict[str, Any] = {"model": args.model, "gen_kwargs": args.gen_kwargs, "tasks": {}}
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        url = f"http://127.0.0.1:{port}"
        run = run_eval(EvalConfig(model=url, tasks=tasks, tokenizer=args.model, out_dir=work / "lmmbench_out",
                                  gen_kwargs=args.gen_kwargs, concurrency=1), show_progress=False)  # fmt: skip
        gen = ",".join(f"{k}" for k in [args.gen_kwargs] if k)
        cmd = [str(args.lmms_python), "-m", "lmms_eval", "--model", "openai", "--model_args",
               f"model_version={args.model},base_url={url}/v1,num_concurrent=1,max_retries=1", "--tasks",
               ",".join(tasks), "--batch_size", "1", "--output_path", str(work / "lmms_out"), "--log_samples",
               *(["--gen_kwargs", gen] if gen else [])]  # fmt: skip
        proc = subprocess.run(cmd, env=dict(os.environ, OPENAI_API_KEY="none"), capture_output=True, text=True,
                              timeout=args.timeout)  # fmt: skip
        report["lmms_eval_rc"] = proc.returncode
    finally:
        server.terminate()
        server.wait(timeout=30)
    theirs_scores, theirs_samples = _lmms_eval_out(work / "lmms_out")
    for r in run.results:
        task = r["task"]
        report["tasks"][task] = {"lmmbench": {k: v["value"] for k, v in r["metrics"].items()},
                                 "lmms_eval_cli": theirs_scores.get(task),
                                 "samples": _compare_samples(task, run.run_dir, theirs_samples.get(task, {}))}
    (work / "serve_crosscheck.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(json.dumps(report, indent=1, default=str))


def _fmt(v: dict[str, float] | None) -> str:
    return "—" if not v else ", ".join(f"{k} {x:.4g}" for k, x in sorted(v.items()))


def markdown(report: dict[str, Any]) -> str:
    """The table for docs/benchmarks.md."""
    lines = ["| task | requests equal (text, image/clip SHA-256, layout, max_tokens) | responses / per-sample "
             "checks equal | lmmbench | lmms-eval CLI | lmms-eval functions |", "|---|---|---|---|---|---|"]
    for task, e in report["tasks"].items():
        rq = e["requests"]
        req = (f"{rq['equal']} / {rq['n']} (lmms-eval sent {rq['n_lmms_eval']}; "
               f"{rq['equal_but_layout']} equal but the layout)")
        smp = e.get("samples")
        per = "—" if not smp else f"{smp['responses_equal']} / {smp['per_sample_equal']} of {smp['n']}"
        lines.append(f"| {task} | {req} | {per} | {_fmt(e['lmmbench'])} | {_fmt(e['lmms_eval_cli'])} | "
                     f"{_fmt(e['lmms_eval_functions'])} |")
    return "\n".join(lines)


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
    e.add_argument("--lmms-groups", default="mmmu_val,chartqa,docvqa_val,textvqa_val,ai2d,scienceqa_img,mme;"
                   "librispeech_test_clean;videomme", help="tasks per lmms-eval CLI run, runs separated by ';'")
    e.add_argument("--lmms-simple", default="videomme", help="tasks run with lmms-eval's simple OpenAI model "
                   "(--force_simple: its chat model needs qwen_vl_utils, which needs torchvision, for video)")
    e.add_argument("--timeout", type=float, default=900)
    v = sub.add_parser("serve")
    v.add_argument("--lmms-python", type=Path, required=True)
    v.add_argument("--work", type=Path, required=True)
    v.add_argument("--model", default="tiny-vl")
    v.add_argument("--tasks", default="mmmu_val,chartqa,docvqa_val,textvqa_val,ai2d,scienceqa_img,mme")
    v.add_argument("--gen-kwargs", default="max_new_tokens=8", help="passed to both tools")
    v.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    {"metrics": cmd_metrics, "endpoint": cmd_endpoint, "serve": cmd_serve}[args.cmd](args)


if __name__ == "__main__":
    main()
