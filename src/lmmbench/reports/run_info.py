"""run.json: the resolved config, the environment (CPU, GPU and driver, library versions), the git
commit, the seed and which timer measured the stages."""

from __future__ import annotations

from typing import Any

from lmmbench.core.clock import wall_label
from lmmbench.core.environment import capture_environment

__all__ = ["RUN_SCHEMA_VERSION", "run_record"]

RUN_SCHEMA_VERSION = 1


def run_record(spec: str, config: dict[str, Any], extra: dict[str, Any], started_at: str,
               stats: dict[str, Any]) -> dict[str, Any]:
    """The content of run.json."""
    return {
        "schema_version": RUN_SCHEMA_VERSION,
        "spec": spec,
        "started_at": started_at,
        "finished_at": wall_label(),
        "config": config,
        "seed": config.get("seed"),
        "timer": extra.get("timer"),
        "environment": capture_environment(),
        "run": extra,
        "stats": stats,
    }
