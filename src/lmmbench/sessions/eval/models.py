"""``lmmbench eval --models a,b``: the same tasks on several models in one command, as AISBench's ``--models``:
one run folder per model (``<out-dir>/<model>/<timestamp>/``; ``--mode perf``: ``<out-dir>/<model>/perf/...``)
and one comparison table, ``<out-dir>/models_comparison.csv`` (model, task, metric, value, stderr), written after
the last model (and printed)."""

from __future__ import annotations

import csv
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.evaluation.eval_config import EvalConfig

__all__ = ["model_folder", "run_eval_models"]


def model_folder(model: str) -> str:
    """A folder name for ``model``: a URL's host and port, a path's last part, a hub id with ``__``."""
    text = re.sub(r"^https?://", "", model.rstrip("/")).removesuffix("/v1")
    text = text.replace("/", "__") if "://" not in model and not Path(model).exists() else text
    if Path(model).exists():
        text = Path(model).name
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "model"


def run_eval_models(cfg: EvalConfig) -> Iterator[EvalConfig]:
    """The config of each model in turn (the caller runs it); the comparison table once every one has run."""
    if cfg.model is not None:
        raise UserError("--models names every model: drop --model")
    if cfg.mode == "eval" or cfg.resume is not None:
        raise UserError("--models runs the models: not with --mode eval or --resume (score each run folder alone)")
    folders = [model_folder(m) for m in cfg.models]
    if len(set(folders)) != len(folders):
        raise UserError(f"--models: two models share a folder name ({', '.join(folders)}); give distinct models")
    table = cfg.out_dir / "models_comparison.csv"
    if table.exists():
        raise UserError(f"{table} exists: give a fresh --out-dir")
    for model, folder in zip(cfg.models, folders, strict=True):
        print(f"[eval] model {model} -> {cfg.out_dir / folder}", file=sys.stderr)
        yield cfg.model_copy(update={"model": model, "models": [], "out_dir": cfg.out_dir / folder})
    rows = [row for model, folder in zip(cfg.models, folders, strict=True)
            for row in _results(model, cfg.out_dir / folder)]  # fmt: skip
    _write(table, rows)
    print(f"[eval] comparison of {len(folders)} models: {table}", file=sys.stderr)


def _results(model: str, out: Path) -> list[dict[str, Any]]:
    """One row per task and metric of the latest run under ``out`` (eval runs: results/<task>.json; perf runs:
    their summary.csv's accuracy / latency columns)."""
    rows: list[dict[str, Any]] = []
    runs = sorted(p for p in out.glob("*") if p.is_dir() and (p / "results").is_dir())
    for res in sorted((runs[-1] / "results").glob("*.json")) if runs else []:
        data = json.loads(res.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "metrics" not in data:
            continue
        for name, mv in data["metrics"].items():
            rows.append({"model": model, "task": data.get("task"), "metric": name, "value": mv.get("value"),
                         "stderr": mv.get("stderr"), "n": mv.get("n"), "run_dir": str(runs[-1])})  # fmt: skip
    for summary in sorted(out.glob("perf/*/summary.csv")):
        with summary.open(encoding="utf-8", newline="") as fh:
            for r in csv.DictReader(fh):
                for name in ("qps", "ttft_ms_p50", "tpot_ms_mean", "output_token_throughput"):
                    rows.append({"model": model, "task": r.get("tasks"), "metric": f"{name} [point {r.get('point')}]",
                                 "value": r.get(name), "run_dir": str(summary.parent)})  # fmt: skip
    return rows


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    cols = ["model", "task", "metric", "value", "stderr", "n", "run_dir"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        value = r.get("value")
        shown = f"{float(value):.4f}" if isinstance(value, (int, float)) else str(value)
        print(f"[eval] {r['model']:>24}  {r['task']!s:>16}  {r['metric']:<36} {shown}", file=sys.stderr)
