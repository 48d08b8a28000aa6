"""Write a load point as ``vllm bench serve --save-result`` does: the same keys, file name and folder
rules (``<label>-<rate>qps[-concurrency<N>]-<model>-<date>.json``, ``--result-filename``,
``--result-dir``), so dashboards fed by vLLM's result files read lmmbench's."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.request_records import RequestRecord
from lmmbench.metrics.vllm_result import vllm_benchmark_result
from lmmbench.reports.json_files import write_json

__all__ = ["vllm_result", "write_vllm_result"]

_GOODPUT_NAMES = {"ttft_ms": "ttft", "tpot_ms": "tpot", "e2e_ms": "e2el"}


def _rate_text(cfg: PerfConfig) -> str:
    return str(float(cfg.rate)) if cfg.rate is not None and not math.isinf(cfg.rate) else "inf"


def vllm_result(cfg: PerfConfig, records: list[RequestRecord], model: str, duration_s: float,
                date: str) -> dict[str, Any]:  # fmt: skip
    """The whole result JSON of one load point (vLLM's setup keys, then its benchmark keys)."""
    backend = cfg.backend or "openai"
    head: dict[str, Any] = {
        **cfg.metadata,  # first: a --metadata key never overwrites a key lmmbench measured or records
        "date": date, "endpoint_type": backend, "backend": backend, "label": cfg.label, "model_id": model,
        "tokenizer_id": str(cfg.tokenizer) if cfg.tokenizer else model,
        "num_prompts": cfg.num_requests,
        "request_rate": cfg.rate if cfg.rate is not None and not math.isinf(cfg.rate) else "inf",
        "burstiness": cfg.burstiness, "max_concurrency": cfg.concurrency,
    }  # fmt: skip
    goodput = {_GOODPUT_NAMES[k]: v for k, v in cfg.slo.items() if k in _GOODPUT_NAMES}
    body = vllm_benchmark_result(
        records, duration_s=duration_s, percentiles=cfg.percentiles, percentile_metrics=cfg.percentile_metrics,
        goodput_ms=goodput or None, detailed=cfg.save_detailed, queue_metrics=cfg.concurrency is not None,
        from_scheduled=not (cfg.rate is not None and math.isinf(cfg.rate)),
    )  # fmt: skip
    return {**head, **body}


def write_vllm_result(cfg: PerfConfig, records: list[RequestRecord], model: str, duration_s: float,
                      run_dir: Path, point: int, points: int) -> Path:  # fmt: skip
    """Write one point's vLLM-format result; returns its path."""
    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    conc = f"-concurrency{cfg.concurrency}" if cfg.concurrency is not None else ""
    name = f"{cfg.label or cfg.backend or 'openai'}-{_rate_text(cfg)}qps{conc}-{model.split('/')[-1]}-{date}.json"
    if cfg.result_filename:
        name = cfg.result_filename
    if points > 1:  # one file per load point of a sweep or workload
        p = Path(name)
        name = f"{p.stem}-point{point}{p.suffix}"
    folder = cfg.result_dir if cfg.result_dir is not None else run_dir
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    write_json(path, vllm_result(cfg, records, model, duration_s, date))
    return path
