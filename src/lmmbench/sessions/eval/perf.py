"""``lmmbench eval --mode perf``: AISBench's perf pipeline (infer -> perf summary, no scoring). The tasks'
requests, exactly as ``eval --model URL`` sends them, go to the endpoint as one perf load point at ``--concurrency``
(closed loop, one pass over the documents); the run is a perf run (``<out-dir>/perf/<timestamp>/``: records,
summary.csv, report.json, report.html, and AISBench's ``logs/``, ``predictions/``, ``results/``, ``summary/``).
``lmmbench perf --tasks`` gives the same workload every load option of ``perf`` (rates, sweeps, duration)."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.evaluation.eval_config import EvalConfig

__all__ = ["run_eval_perf"]

#: eval options that act on in-process models, scoring or the run store: perf mode refuses them
_NOT_IN_PERF = (
    "resume", "batch_size", "pad_batches", "share_context", "device", "dtype", "threads", "allow_random_weights",
    "baseline", "mlflow", "wandb", "bootstrap_iters", "group_by", "revision",
)  # fmt: skip


def run_eval_perf(cfg: EvalConfig) -> Any:
    """Send the tasks' requests as one perf load point; returns the ``PerfRun``."""
    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.sessions.perf.session import run_perf

    if not cfg.model or not cfg.model.startswith(("http://", "https://")):
        raise UserError("--mode perf sends the tasks' requests to an endpoint: give --model http://host:port")
    given = [f for f in _NOT_IN_PERF if f in cfg.model_fields_set]
    if given:
        raise UserError(f"--mode perf: {', '.join('--' + f.replace('_', '-') for f in given)} do not apply to a "
                        "load test (it infers through the endpoint and does not score)")
    tokenizer = None
    if cfg.tokenizer is not None:  # perf counts output tokens with it when it is a tokenizer.json folder
        from lmmbench.models import resolve_model

        path = resolve_model(cfg.tokenizer).path
        tokenizer = path if (path / "tokenizer.json").is_file() else None
    stamp = _dt.datetime.now().strftime("%Y%m%d_%H%M%S")
    pcfg = PerfConfig.model_validate({
        "url": cfg.model, "model": cfg.served_model, "tasks": list(cfg.tasks), "concurrency": cfg.concurrency,
        "out_dir": cfg.out_dir, "run_name": stamp, "tokenizer": tokenizer, "wait_for_server": cfg.wait_for_server,
        "progress": False})  # fmt: skip
    run = run_perf(pcfg, eval_cfg=cfg)
    logs = run.run_dir / "logs"
    logs.mkdir(exist_ok=True)
    (logs / "config_perf.json").write_text(json.dumps({"eval_config": cfg.model_dump(mode="json"),
                                                       "perf_config": pcfg.model_dump(mode="json")}, indent=2)
                                           + "\n")  # fmt: skip
    return run
