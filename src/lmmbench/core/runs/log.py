"""The run log: one versioned schema for the ``run.json`` of every kind of run.

A spec, perf, eval or reference run (and, when they land, episodic and plan runs) describes itself
with one ``RunLog``: the resolved config, the environment (``core.environment``), how it measured
(``Measurement``), what came out (``Outcome``), its headline metrics and its files. Every writer goes
through ``write_run_log``, which writes ``run.json`` and, once the run has finished, indexes it in
the run store. ``load_run_log`` also reads the three layouts written before this schema (spec
``schema_version`` 1, perf's unversioned file, eval's ``logs/config_<mode>.json``).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from lmmbench.core.runs.log_schema import (
    RUN_LOG_NAME,
    RUN_LOG_VERSION,
    Measurement,
    Outcome,
    RunKind,
    RunLog,
    RunStatus,
    load_run_log,
    measurement_from,
    new_run_id,
)

__all__ = [
    "RUN_LOG_NAME",
    "RUN_LOG_VERSION",
    "Measurement",
    "Outcome",
    "RunKind",
    "RunLog",
    "RunStatus",
    "load_run_log",
    "measurement_from",
    "new_run_id",
    "write_run_log",
]

log = logging.getLogger(__name__)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_run_log(run_dir: Path, run_log: RunLog, *, index: bool = True) -> Path:
    """Write ``run_dir/run.json``; once the run has finished, index it in the run store.

    Indexing is best effort: a store that cannot be reached (or SQLAlchemy missing) is a logged
    warning, never a lost run.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RUN_LOG_NAME
    if run_log.status in (None, "running"):  # a log written at the start and finished in place
        run_log.status = run_log.settled_status()
    from lmmbench.core.hub import resolved_snapshots
    from lmmbench.core.secrets import redact_config

    if resolved_snapshots() and "hub_snapshots" not in run_log.environment:  # the commit of every hub id used
        run_log.environment["hub_snapshots"] = resolved_snapshots()
    from lmmbench.core.runs.fingerprint import FINGERPRINT_KEY, workload_fingerprint

    fingerprint = workload_fingerprint(run_log)  # what decides comparability with an earlier run (docs/runs.md)
    if fingerprint is not None:
        run_log.run[FINGERPRINT_KEY] = fingerprint

    data = redact_config(_finite(run_log.model_dump(mode="json", exclude_none=False)))  # no --api-key in files
    run_log = RunLog.model_validate(data)  # the store and the sinks get the redacted log too
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
    if index and run_log.finished_at is not None:
        try:
            from lmmbench.core.runs.store import RunStore

            RunStore.open().index(run_log, run_dir)
        except ModuleNotFoundError as exc:
            log.warning("run not indexed (%s is not installed): pip install sqlalchemy", exc.name)
        except Exception as exc:  # the store must never lose a run
            log.warning("run %s not indexed in the run store: %s", run_log.run_id, exc)
        from lmmbench.core.runs.sinks import log_to_sinks

        log_to_sinks(run_log, run_dir)  # --mlflow / --wandb, when given
    return path
