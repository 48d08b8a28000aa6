"""`lmmbench bench ais` against AISBench 3.1 itself: the same command lines, the same shipped config files, the same
local gsm8k-format data, one scripted server (port 8080, where AISBench's shipped model configs point).

AISBench needs a venv of its own (numpy < 2, datasets <= 3.6, torch, ~50 packages)::

    python -m venv /tmp/ais-venv && /tmp/ais-venv/bin/pip install 'ais-bench-benchmark==3.1.*'
    python benchmarks/aisbench_crosscheck.py --ais-venv /tmp/ais-venv --work /tmp/ais-xc

For every supported pair (the four vllm_api model configs x the gsm8k forms) it compares, AISBench against lmmbench:
the multiset of request bodies the server received, the predictions (id, origin_prompt, prediction, gold), the
result file (accuracy, per-sample details) and the summary CSV (with the version column). It prints one JSON
report and exits 1 when anything differs. First run against AISBench 3.1.20260630 on 2026-11-28 (docs/benchmarks.md);
run it from a scratch folder (AISBench writes a ``tmp/`` folder into its working folder).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

MODELS = ["vllm_api_general", "vllm_api_general_stream", "vllm_api_general_chat", "vllm_api_stream_chat"]
DATASETS = ["gsm8k_gen_0_shot_cot_str", "gsm8k_gen_0_shot_cot_str_perf", "gsm8k_gen_4_shot_cot_str",
            "gsm8k_gen_0_shot_cot_chat_prompt", "gsm8k_gen_0_shot_noncot_chat_prompt",
            "gsm8k_gen_4_shot_cot_chat_prompt", "demo_gsm8k_gen_4_shot_cot_chat_prompt"]  # fmt: skip
ROWS = [
    {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3+4=7\n#### 7"},
    {"question": "A box holds 1,200 pens; 200 are sold. How many left?", "answer": "1200-200=1000\n#### 1,000"},
    {"question": "What is 6 times 7?", "answer": "6*7=42\n#### 42"},
]
LMMBENCH = "import sys; from lmmbench.cli.main import main; sys.exit(main(sys.argv[1:]))"
RULES = [("Tom has", None, "He has 3+4 = 7 apples."), ("1,200 pens", None, "<think>maybe 9</think>So 1000 remain."),
         ("6 times", None, "It is 41\nQuestion: 5")]  # fmt: skip


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import ais_bench, os; print(os.path.dirname(os.path.dirname("
                          "ais_bench.__file__)))"], capture_output=True, text=True, check=True)  # fmt: skip
    return Path(out.stdout.strip())


def _run_tool(cmd: list[str], env: dict[str, str], server: Any) -> list[dict[str, Any]]:
    server.requests.clear()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return [r["body"] for r in server.requests]


def _outputs(work_dir: Path, model_abbr: str, ds_abbr: str) -> dict[str, Any]:
    run = sorted(p for p in work_dir.iterdir() if p.is_dir())[-1]
    preds = [json.loads(x) for x in (run / "predictions" / model_abbr / f"{ds_abbr}.jsonl").read_text().splitlines()]
    preds = sorted(({k: p.get(k) for k in ("id", "origin_prompt", "prediction", "gold")} for p in preds),
                   key=lambda p: p["id"])  # fmt: skip
    result = json.loads((run / "results" / model_abbr / f"{ds_abbr}.json").read_text())
    summary = next((run / "summary").glob("summary_*.csv")).read_text().splitlines()
    return {"predictions": preds, "result": result, "summary": summary}


def _abbrs(site: Path, model: str, dataset: str) -> tuple[str, str]:
    from lmmbench.config.dropins.aisbench_configs import load_datasets, load_models

    return (load_models([model], "configs", site)[0].abbr, load_datasets([dataset], "configs", site)[0].abbr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ais-venv", type=Path, required=True, help="the venv AISBench is installed in")
    ap.add_argument("--work", type=Path, required=True)
    args = ap.parse_args()
    from lmmbench.testing.scripted_server import ScriptedServer

    ais_python = args.ais_venv / "bin" / "python"
    site = _site_packages(ais_python)
    cache = args.work / "cache"
    data = cache / "ais_bench" / "datasets" / "gsm8k"
    data.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):  # AISBench's GSM8KDataset reads both splits
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    env = {**os.environ, "AIS_BENCH_DATASETS_CACHE": str(cache),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    report: dict[str, Any] = {"aisbench_root": str(site), "pairs": {}}
    with ScriptedServer(RULES, default="none", model="scripted", port=8080) as server:
        for model in MODELS:
            for dataset in DATASETS:
                key = f"{model} x {dataset}"
                common = ["--models", model, "--datasets", dataset, "--num-warmups", "0", "--dump-eval-details"]
                theirs_dir, ours_dir = args.work / "ais" / key, args.work / "lmmbench" / key
                theirs = _run_tool([str(args.ais_venv / "bin" / "ais_bench"), *common, "--work-dir", str(theirs_dir)],
                                   env, server)  # fmt: skip
                ours = _run_tool([sys.executable, "-c", LMMBENCH, "bench", "ais", "--aisbench-root", str(site),
                                  *common, "--work-dir", str(ours_dir)], env, server)  # fmt: skip
                m_abbr, d_abbr = _abbrs(site, model, dataset)
                a, b = _outputs(theirs_dir, m_abbr, d_abbr), _outputs(ours_dir, m_abbr, d_abbr)
                report["pairs"][key] = {
                    "bodies_equal": Counter(json.dumps(x) for x in theirs) == Counter(json.dumps(x) for x in ours),
                    "predictions_equal": a["predictions"] == b["predictions"],
                    "accuracy": [a["result"].get("accuracy"), b["result"].get("accuracy")],
                    "details_equal": a["result"].get("details") == b["result"].get("details"),
                    "summary_equal": a["summary"] == b["summary"],
                    "summary": [a["summary"], b["summary"]],
                }
    checks = ("bodies_equal", "predictions_equal", "details_equal", "summary_equal")
    bad = [k for k, v in report["pairs"].items()
           if not all(v[f] for f in checks) or v["accuracy"][0] != v["accuracy"][1]]  # fmt: skip
    report["differ"] = bad
    print(json.dumps(report, indent=2))
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
