"""`lmmbench bench ais --mode perf` against AISBench's own `--mode perf`: one test server with injected TTFT and
inter-token gap, the same synthetic data set config, both tools' metrics against the injected truth, and each
tool's `perf_viz` over the other's `performances/` folder (the files one writes must be the files the other reads
and summarises to the same `.csv` / `.json`).

AISBench needs a venv of its own (see docs/eval.md, "AISBench's perf mode", for the uv command)::

    python benchmarks/aisbench_perf_crosscheck.py --ais-venv /tmp/ais-venv --work /tmp/ais-perf-xc

Prints one JSON report; exits 1 when the files differ in anything but the known difference of the 3.1.20260630
release from AISBench's repository (``Prefill Token Throughput``: a common metric there, a per-request row here).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
LMMBENCH = "import sys; from lmmbench.cli.main import main; sys.exit(main(sys.argv[1:]))"
TTFT_MS, ITL_MS, N_IN, N_OUT, COUNT = 30.0, 10.0, 4, 5, 8

MODEL = '''from ais_bench.benchmark.models import VLLMCustomAPIChat

models = [
    dict(attr="service", type=VLLMCustomAPIChat, abbr="stream_chat", path="{tok}", model="", stream=True,
         request_rate=0, retry=2, api_key="", host_ip="127.0.0.1", host_port={port}, url="", max_out_len=64,
         batch_size=2, trust_remote_code=False, generation_kwargs=dict(temperature=0.5))
]
'''
DATASET = '''from ais_bench.benchmark.openicl.icl_prompt_template import PromptTemplate
from ais_bench.benchmark.openicl.icl_retriever import ZeroRetriever
from ais_bench.benchmark.openicl.icl_inferencer import GenInferencer
from ais_bench.benchmark.datasets import SyntheticDataset

synthetic_config = {{"Type": "string", "RequestCount": {count}, "TrustRemoteCode": False, "StringConfig": {{
    "Input": {{"Method": "uniform", "Params": {{"MinValue": {n_in}, "MaxValue": {n_in}}}}},
    "Output": {{"Method": "uniform", "Params": {{"MinValue": {n_out}, "MaxValue": {n_out}}}}}}}}}
synthetic_datasets = [dict(abbr='synthetic', type=SyntheticDataset, config=synthetic_config,
    reader_cfg=dict(input_columns=['question', 'max_out_len'], output_column='answer'),
    infer_cfg=dict(prompt_template=dict(type=PromptTemplate, template="{{question}}"),
                   retriever=dict(type=ZeroRetriever), inferencer=dict(type=GenInferencer)))]
'''
KNOWN = ("PrefillTokenThroughput", "Prefill Token Throughput")


def _configs(work: Path, port: int) -> Path:
    """Configs both tools read; the model's ``path`` a word-level tokenizer AISBench's perf summarizer loads."""
    from lmmbench.testing.fixtures import build_word_tokenizer

    tok = build_word_tokenizer(work / "tokenizer", extra_words=["A"])
    (tok / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                           "unk_token": "[UNK]"}))  # fmt: skip
    cfg = work / "configs"
    (cfg / "models").mkdir(parents=True, exist_ok=True)
    (cfg / "datasets").mkdir(parents=True, exist_ok=True)
    (cfg / "models" / "xc_stream_chat.py").write_text(MODEL.format(tok=tok, port=port))
    (cfg / "datasets" / "xc_synthetic.py").write_text(DATASET.format(count=COUNT, n_in=N_IN, n_out=N_OUT))
    return cfg


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def _files(perf: Path) -> dict[str, Any]:
    rows = {r[0]: r[1:] for r in csv.reader((perf / "synthetic.csv").open())}
    common = json.loads((perf / "synthetic.json").read_text())
    return {"csv": {k: v for k, v in rows.items() if k not in KNOWN},
            "json": {k: v for k, v in common.items() if k not in KNOWN}, "csv_rows": rows}  # fmt: skip


def _resummarise(tool: list[str], cfg: Path, run: Path, cwd: Path) -> dict[str, Any]:
    """Copy ``run``, drop its .csv / .json, let ``tool`` write them again with ``--mode perf_viz --reuse``."""
    copy = cwd / f"viz-{run.parent.name}" / run.name
    shutil.rmtree(copy.parent, ignore_errors=True)
    shutil.copytree(run, copy)
    perf = copy / "performances" / "stream_chat"
    for name in ("synthetic.csv", "synthetic.json"):
        (perf / name).unlink()
    _run([*tool, "--config-dir", str(cfg), "--models", "xc_stream_chat", "--datasets", "xc_synthetic",
          "--work-dir", str(copy.parent), "--mode", "perf_viz", "--reuse", run.name], cwd)  # fmt: skip
    return _files(perf)


def _truth(files: dict[str, Any]) -> dict[str, Any]:
    rows = files["csv_rows"]
    head = rows["Performance Parameters"]

    def ms(metric: str, stat: str) -> float:
        return float(rows[metric][head.index(stat)].removesuffix(" ms"))

    return {"TTFT median - injected (ms)": round(ms("TTFT", "Median") - TTFT_MS, 2),
            "ITL median - injected (ms)": round(ms("ITL", "Median") - ITL_MS, 2),
            "TPOT median - injected (ms)": round(ms("TPOT", "Median") - ITL_MS, 2)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ais-venv", type=Path, required=True, help="the venv AISBench is installed in")
    ap.add_argument("--work", type=Path, required=True)
    args = ap.parse_args()
    from lmmbench.config.perf.testserver import TestServerConfig
    from lmmbench.core.net import free_loopback_port
    from lmmbench.testing import running_testserver

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)  # AISBench writes tmp/ files into its working folder: this one
    ais = [str(args.ais_venv / "bin" / "ais_bench")]
    ours = [sys.executable, "-c", LMMBENCH, "bench", "ais"]
    server = TestServerConfig(port=free_loopback_port(), ttft_ms=TTFT_MS, itl_ms=ITL_MS, role_chunk=False)
    with running_testserver(server):
        cfg = _configs(work, server.port)
        runs = {}
        for name, tool in (("aisbench", ais), ("lmmbench", ours)):
            out = work / name
            shutil.rmtree(out, ignore_errors=True)
            _run([*tool, "--config-dir", str(cfg), "--models", "xc_stream_chat", "--datasets", "xc_synthetic",
                  "--mode", "perf", "--work-dir", str(out)], work)  # fmt: skip
            runs[name] = next(out.iterdir())
    own = {name: _files(run / "performances" / "stream_chat") for name, run in runs.items()}
    swapped = {"lmmbench over aisbench": _resummarise(ours, cfg, runs["aisbench"], work),
               "aisbench over lmmbench": _resummarise(ais, cfg, runs["lmmbench"], work)}  # fmt: skip
    same = {"lmmbench over aisbench": swapped["lmmbench over aisbench"]["csv"] == own["aisbench"]["csv"]
            and swapped["lmmbench over aisbench"]["json"] == own["aisbench"]["json"],
            "aisbench over lmmbench": swapped["aisbench over lmmbench"]["csv"] == own["lmmbench"]["csv"]
            and swapped["aisbench over lmmbench"]["json"] == own["lmmbench"]["json"]}  # fmt: skip
    report = {"injected": {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS},
              "against_injected": {name: _truth(f) for name, f in own.items()},
              "files_equal_but_prefill": same, "aisbench_csv": own["aisbench"]["csv_rows"],
              "lmmbench_csv": own["lmmbench"]["csv_rows"]}  # fmt: skip
    print(json.dumps(report, indent=2))
    raise SystemExit(0 if all(same.values()) else 1)


if __name__ == "__main__":
    main()
