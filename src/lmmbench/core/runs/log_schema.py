"""The run log's schema and its reader: ``RunLog`` (config, environment, measurement, outcome, headline,
files), ``load_run_log`` for every layout lmmbench wrote. ``core.runs.log`` adds the writer, which also
indexes the run in the store; the store reads run logs through this module, so the two never import
each other.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lmmbench.core.errors import UserError, user_error_from_validation

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
]

RUN_LOG_VERSION = 2
RUN_LOG_NAME = "run.json"
RunKind = Literal["spec", "perf", "eval", "reference", "episodic", "plan"]
#: Where a run stands: in progress, ran to its end, stopped by a signal, ended by an error, rebuilt from
#: its journal after a crash (``perf recover``).
RunStatus = Literal["running", "complete", "interrupted", "failed", "recovered"]
_STATUSES = frozenset(get_args(RunStatus))


class Measurement(BaseModel):
    """How the numbers were taken. Unknown keys are kept (other parts add their own)."""

    model_config = ConfigDict(extra="allow")

    timer: str | None = Field(default=None, description="Clock of the durations (perf_counter_ns, cuda_events, ...).")
    event_loop: str | None = Field(default=None, description="asyncio or uvloop (load tests).")
    send_timer: str | None = Field(default=None, description="What fired the sends: timerfd, spin, closed-loop.")
    device: str | None = None
    dtype: str | None = None
    threads: int | None = Field(default=None, description="torch threads (in-process runs).")
    attention_implementation: str | None = None
    processor_path: str | None = Field(default=None, description="fast, slow or lmmbench's assembled processor.")
    processor_classes: list[str] | None = None
    random_weights: bool | None = None
    dropped_hooks: list[str] | None = None


class Outcome(BaseModel):
    """What a run produced: counts, whether it was interrupted, failures by kind."""

    model_config = ConfigDict(extra="allow")

    ok: int | None = None
    failed: int | None = None
    skipped: int | None = Field(default=None, description="Already done (resumed runs).")
    interrupted: bool = False
    failures_by_kind: dict[str, int] = Field(default_factory=dict)


class RunLog(BaseModel):
    """The content of ``run.json`` (schema version 2)."""

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="null")

    schema_version: int = RUN_LOG_VERSION
    run_id: str
    kind: RunKind
    name: str = Field(description="Spec name, perf run name or eval run folder.")
    status: RunStatus | None = Field(
        default=None, description="running, complete, interrupted, failed or recovered (set when read or written)."
    )
    model: str | None = None
    labels: dict[str, Any] = Field(default_factory=dict)
    started_at: str | None = None
    finished_at: str | None = Field(default=None, description="Unset while the run is in progress.")
    config: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)
    measurement: Measurement = Field(default_factory=lambda: Measurement())
    outcome: Outcome = Field(default_factory=lambda: Outcome())
    headline: dict[str, float | None] = Field(default_factory=dict, description="Headline metrics, for the store.")
    run: dict[str, Any] = Field(default_factory=dict, description="Kind-specific facts (spec context, points).")
    files: list[str] = Field(default_factory=list, description="Files of the run, relative to its folder.")
    legacy_layout: str | None = Field(default=None, description="Set when read from an older layout.")

    @model_validator(mode="before")
    @classmethod
    def _known_status(cls, data: Any) -> Any:
        """A status this schema does not know (a hand-edited or future file) is read as unset, not refused."""
        status = data.get("status") if isinstance(data, dict) else None
        if status is not None and not (isinstance(status, str) and status in _STATUSES):
            return {k: v for k, v in data.items() if k != "status"}
        return data

    @model_validator(mode="after")
    def _fill_status(self) -> RunLog:
        """A log without ``status`` (older files): the one its ``run`` section kept, else from its outcome."""
        if self.status is None:
            kept = self.run.get("status")
            self.status = kept if isinstance(kept, str) and kept in _STATUSES else self.settled_status()  # type: ignore[assignment]
        return self

    def settled_status(self) -> RunStatus:
        """The status its times and outcome say: running until finished, then interrupted or complete."""
        if self.finished_at is None:
            return "running"
        return "interrupted" if self.outcome.interrupted else "complete"


def new_run_id(kind: str) -> str:
    """A unique, sortable, readable id: ``<kind>-<YYYYmmdd-HHMMSS>-<4 hex>``."""
    return f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


_MEASUREMENT_KEYS = {"timer": "timer", "torch_threads": "threads", "threads": "threads", "dtype": "dtype",
                     "device": "device", "event_loop": "event_loop", "send_timer": "send_timer",
                     "attention_implementation": "attention_implementation", "processor_path": "processor_path",
                     "processor_classes": "processor_classes", "random_weights": "random_weights",
                     "dropped_hooks": "dropped_hooks"}  # fmt: skip


def measurement_from(*sources: dict[str, Any]) -> Measurement:
    """A ``Measurement`` from the first value of each known key in ``sources`` (a run's context
    dict, its config, the model record ``{"dtype", "device", ...}``)."""
    found: dict[str, Any] = {}
    for src in sources:
        for key, target in _MEASUREMENT_KEYS.items():
            value = src.get(key)
            if value is not None and target not in found:
                found[target] = value
    if isinstance(found.get("processor_classes"), dict):
        found["processor_classes"] = [str(v) for v in found["processor_classes"].values()]
    if isinstance(found.get("dropped_hooks"), dict):
        found["dropped_hooks"] = list(found["dropped_hooks"])
    for key in ("device", "dtype", "timer", "processor_path", "attention_implementation"):
        if key in found:
            found[key] = str(found[key])
    return Measurement.model_validate(found)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte at offset {exc.start}); not a run log lmmbench wrote") from None
    except (OSError, json.JSONDecodeError, RecursionError) as exc:
        raise UserError(f"{path}: cannot read the run log ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a run log (expected a JSON object)")
    return data


def _find_file(target: Path) -> Path:
    if target.is_file():
        return target
    if (target / RUN_LOG_NAME).is_file():
        return target / RUN_LOG_NAME
    configs = sorted((target / "logs").glob("config_*.json"))
    if configs:
        return configs[-1]
    raise UserError(f"{target}: no run.json (or eval logs/config_<mode>.json) here; pass a run folder")


def load_run_log(target: Path) -> RunLog:
    """The run log of a run folder (or of a run.json path), whatever layout wrote it."""
    path = _find_file(Path(target))
    data = _read_json(path)
    from lmmbench.core.runs.log_legacy import upgrade

    fields, measured_from = upgrade(data, path)
    if measured_from is not None:
        fields = {**fields, "measurement": measurement_from(*measured_from)}
    try:
        return RunLog.model_validate(fields)
    except ValidationError as exc:
        raise user_error_from_validation(exc, f"{path}: not a run log lmmbench can read") from None
