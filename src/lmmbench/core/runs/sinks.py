"""Optional sinks: a finished run's config and headline metrics logged to MLflow or Weights & Biases.

A run whose config has ``mlflow`` (a tracking URI, e.g. ``file:///tmp/mlruns``) or ``wandb`` (a
project name) set — or the environment ``LMMBENCH_MLFLOW_URI`` / ``LMMBENCH_WANDB_PROJECT`` — is
logged there when ``write_run_log`` indexes it. Sinks are a registry (``RUN_SINKS``, entry-point group
``lmmbench.run_sinks``); their libraries are imported only when used, and a sink that fails or whose
library is missing is a logged warning, never a lost run.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lmmbench.core.registry import Registry

if TYPE_CHECKING:  # only a type here: run_log calls the sinks, so importing it would close a circle
    from lmmbench.core.runs.log import RunLog

__all__ = ["RUN_SINKS", "RunSink", "flat_config", "log_to_sinks"]

log = logging.getLogger(__name__)

_ENV = {"mlflow": "LMMBENCH_MLFLOW_URI", "wandb": "LMMBENCH_WANDB_PROJECT"}


class RunSink(Protocol):
    """Logs a finished run to ``target`` (a URI, a project name: what the sink's option says)."""

    def __call__(self, run_log: RunLog, run_dir: Path, target: str) -> None: ...


RUN_SINKS: Registry[RunSink] = Registry("run_sinks")


def flat_config(obj: Any, prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}`` (values as text, cut at 500 characters)."""
    if isinstance(obj, dict):
        out: dict[str, str] = {}
        for k, v in obj.items():
            out.update(flat_config(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): str(obj)[:500]}


def _metric_key(key: str) -> str:
    return re.sub(r"[^0-9A-Za-z_\-. /]", "_", key).strip("_ ")


@RUN_SINKS.register("mlflow")
def _mlflow(run_log: RunLog, run_dir: Path, target: str) -> None:
    import mlflow

    if target.startswith("file:"):  # asking for a file store is opting in to MLflow's maintenance-mode backend
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(target)
    mlflow.set_experiment(f"lmmbench-{run_log.kind}")
    with mlflow.start_run(run_name=f"{run_log.name} ({run_log.run_id})"):
        params = {_metric_key(k): v for k, v in flat_config(run_log.config).items()}
        mlflow.log_params(params)
        mlflow.set_tags({"lmmbench.run_id": run_log.run_id, "lmmbench.kind": run_log.kind,
                         "lmmbench.model": str(run_log.model), "lmmbench.folder": str(run_dir)})  # fmt: skip
        metrics = {_metric_key(k): float(v) for k, v in run_log.headline.items() if v is not None}
        if metrics:
            mlflow.log_metrics(metrics)


@RUN_SINKS.register("wandb")
def _wandb(run_log: RunLog, run_dir: Path, target: str) -> None:
    import wandb

    run = wandb.init(project=target, name=f"{run_log.name} ({run_log.run_id})", dir=str(run_dir),
                     config={**run_log.config, "lmmbench_run_id": run_log.run_id, "lmmbench_kind": run_log.kind},
                     tags=[run_log.kind])  # fmt: skip
    try:
        metrics = {k: v for k, v in run_log.headline.items() if v is not None}
        if metrics:
            run.log(metrics)
            run.summary.update(metrics)
    finally:
        run.finish()


def log_to_sinks(run_log: RunLog, run_dir: Path) -> list[str]:
    """Log ``run_log`` to every sink its config (or the environment) names; returns the sinks that took it."""
    done = []
    for name in RUN_SINKS.names():
        target = run_log.config.get(name) or os.environ.get(_ENV.get(name, ""), "")
        if not target:
            continue
        try:
            RUN_SINKS.get(name)(run_log, run_dir, str(target))
            done.append(name)
        except ModuleNotFoundError as exc:
            log.warning("--%s: %s is not installed (pip install 'lmmbench[tracking]'); the run is not logged there",
                        name, exc.name)  # fmt: skip
        except Exception as exc:  # a sink must never lose the run
            log.warning("--%s %s: could not log run %s: %s", name, target, run_log.run_id, exc)
    return done
