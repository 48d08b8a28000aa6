"""Configuration of ``lmmbench runs list|show|compare|report|index``: pydantic models the CLI is derived from."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["SIDE_SEPARATOR", "RunsCompareConfig", "RunsIndexConfig", "RunsListConfig", "RunsReportConfig",
           "RunsShowConfig"]  # fmt: skip

#: Written between the two sides of a pooled comparison: `runs compare A1 A2 -- B1 B2` (or `vs`).
SIDE_SEPARATOR = "vs"


class RunsListConfig(BaseModel):
    """List the runs in the run store, newest first."""

    model_config = ConfigDict(extra="forbid")

    kind: str | None = Field(None, description="Only runs of this kind: spec, perf, eval, reference.")
    model: str | None = Field(None, description="Only runs whose model name contains this text.")
    label: dict[str, str] = Field(default_factory=dict, description="Only runs with these labels (all must match).")
    since: str | None = Field(None, description="Started on or after this date (YYYY-MM-DD or ISO time).")
    until: str | None = Field(None, description="Started on or before this date (YYYY-MM-DD or ISO time).")
    limit: int = Field(50, ge=1, description="Show at most this many runs.")
    store: str | None = Field(None, description="Store URL (default: $LMMBENCH_STORE_URL or SQLite in LMMBENCH_HOME).")

    @field_validator("since", "until")
    @classmethod
    def _iso_date(cls, value: str | None) -> str | None:
        """A date or date-time as ISO text (what the store compares): 'notadate' matched nothing, silently."""
        if value is None:
            return value
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{value!r} is not a date like 2026-11-24 or 2026-11-24T10:00:00") from None
        return value


def check_thresholds(value: dict[str, float]) -> dict[str, float]:
    """A threshold is a size of change (percent, or points): finite and at least 0."""
    for name, number in value.items():
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"--threshold {name}={number:g}: a threshold is a change's size, a finite number >= 0 "
                             "(percent; points for accuracies)")  # fmt: skip
    return value


class RunsShowConfig(BaseModel):
    """Show one run: its run log (config, environment, measurement, outcome, headline, files)."""

    model_config = ConfigDict(extra="forbid")

    run: str = Field(description="Run id, unique id prefix, or run folder.")
    json_output: bool = Field(False, description="Print the whole run log as JSON.")
    store: str | None = Field(None, description="Store URL (default: $LMMBENCH_STORE_URL or SQLite in LMMBENCH_HOME).")


class RunsCompareConfig(BaseModel):
    """Compare runs: the first is the baseline, each other run is compared with it; `A1 A2 -- B1 B2` pools
    each side's runs. Per metric: the change, a bootstrap interval, and a verdict."""

    model_config = ConfigDict(extra="forbid")

    runs: list[str] = Field(description="Run ids, id prefixes or folders; `--` (or `vs`) between pooled sides.")
    threshold: dict[str, float] = Field(
        default_factory=dict,
        description="Per-metric threshold, e.g. ttft_ms=5,acc=2 (percent; points for accuracies). "
        "Defaults: 10 % latencies and throughputs, 1 point accuracies.",
    )

    @field_validator("threshold")
    @classmethod
    def _thresholds(cls, value: dict[str, float]) -> dict[str, float]:
        return check_thresholds(value)
    statistics: list[str] = Field(["mean", "p50"], description="Statistics of latency metrics: mean, p50, p90, p99.")
    resamples: int = Field(1000, ge=100, le=100_000, description="Bootstrap resamples.")
    seed: int = Field(0, description="Seed of the bootstrap.")
    fail_on_regression: bool = Field(False, description="Exit 1 when any metric regressed (for CI).")
    show_all: bool = Field(False, description="List every metric, not only changed ones and the headline ones.")
    store: str | None = Field(None, description="Store URL (default: $LMMBENCH_STORE_URL or SQLite in LMMBENCH_HOME).")


class RunsReportConfig(BaseModel):
    """Write a self-contained HTML page comparing runs (first run = baseline; `--` pools sides)."""

    model_config = ConfigDict(extra="forbid")

    runs: list[str] = Field(description="Run ids, id prefixes or folders; `--` (or `vs`) between pooled sides.")
    out: Path = Field(Path("runs-report.html"), description="The page to write.")
    threshold: dict[str, float] = Field(default_factory=dict, description="Per-metric threshold, as for compare.")

    @field_validator("threshold")
    @classmethod
    def _thresholds(cls, value: dict[str, float]) -> dict[str, float]:
        return check_thresholds(value)
    resamples: int = Field(1000, ge=100, le=100_000, description="Bootstrap resamples.")
    store: str | None = Field(None, description="Store URL (default: $LMMBENCH_STORE_URL or SQLite in LMMBENCH_HOME).")


class RunsIndexConfig(BaseModel):
    """Index run folders in the run store (runs written before the store, or copied from elsewhere)."""

    model_config = ConfigDict(extra="forbid")

    folders: list[Path] = Field(description="Run folders (or folders holding run folders, searched below).")
    store: str | None = Field(None, description="Store URL (default: $LMMBENCH_STORE_URL or SQLite in LMMBENCH_HOME).")
