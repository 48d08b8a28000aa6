"""The run log of a spec run (``run.json``): resolved config, environment, how it measured (timer,
device, dtype, threads, processor, attention), outcome, headline metrics and files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmmbench.core.clock import wall_label
from lmmbench.core.environment import capture_environment
from lmmbench.core.runs.log import RUN_LOG_VERSION, Outcome, RunLog, measurement_from, new_run_id
from lmmbench.core.runs.summaries import spec_headline

__all__ = ["RUN_SCHEMA_VERSION", "run_files", "run_record"]

RUN_SCHEMA_VERSION = RUN_LOG_VERSION


def run_record(spec: str, config: dict[str, Any], extra: dict[str, Any], started_at: str,
               stats: dict[str, Any], rows: Sequence[dict[str, Any]] = ()) -> RunLog:
    """The run log of spec ``spec``: ``extra`` is what the spec recorded while running (its context)."""
    model_rec: dict[str, Any] = extra["model"] if isinstance(extra.get("model"), dict) else {}
    failures: dict[str, int] = {}
    for row in rows:
        if row.get("status") not in ("ok", None, ""):
            kind = str(row.get("status"))
            failures[kind] = failures.get(kind, 0) + 1
    return RunLog(
        run_id=new_run_id("spec"), kind="spec", name=spec, model=config.get("model"),
        labels=dict(config.get("labels") or {}), started_at=started_at, finished_at=wall_label(), config=config,
        environment=capture_environment(), measurement=measurement_from(extra, model_rec, config),
        outcome=Outcome.model_validate({
            **{k: v for k, v in stats.items() if k != "skipped_already_done"},  # degraded, rows, ...
            "ok": stats.get("ok"), "failed": stats.get("failed"), "skipped": stats.get("skipped_already_done"),
            "interrupted": bool(stats.get("interrupted")), "failures_by_kind": failures}),
        headline=spec_headline(rows), run=extra,
    )  # fmt: skip


def run_files(run_dir: Path) -> list[str]:
    """Every file of a run folder, relative to it (for the run log's ``files``)."""
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())
