"""Options of ``lmmbench perf`` inherited by ``PerfConfig``: the workload shapes (multi-turn
conversations, shared-prefix groups, trace replay; docs/perf.md "Workloads") and telemetry."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

__all__ = ["TelemetryOptions", "WorkloadShapeOptions"]


class WorkloadShapeOptions(BaseModel):
    """Knobs of the multiturn, shared_prefix and trace datasets."""

    #: none: vLLM's --prefix-repetition-* draw vLLM's own prompts, which ``lmmbench bench serve`` does
    CLI_ALIASES: ClassVar[dict[str, tuple[str, ...]]] = {}

    turns: int = Field(4, ge=1, le=1000, description="multiturn without --dataset-path: turns per conversation.")
    think_time_ms: float = Field(0.0, ge=0, description="multiturn: pause between a reply and the next turn.")
    prefix_groups: int = Field(4, ge=1, description="shared_prefix: groups, each with its own shared prefix.")
    prefix_tokens: int = Field(256, ge=1, description="shared_prefix: tokens of each group's shared prefix.")
    suffix_tokens: int = Field(32, ge=1, description="shared_prefix: tokens of each request's own suffix.")
    trace_format: Literal["auto", "mooncake", "azure"] = Field(
        "auto", description="trace: mooncake (JSONL timestamp/input_length/output_length/hash_ids) or azure (CSV)."
    )
    trace_block_tokens: int = Field(512, ge=1, description="trace: tokens per Mooncake hash_id block.")
    trace_time_scale: float = Field(1.0, gt=0, description="trace: multiply arrival times (0.5 replays twice as fast).")


class TelemetryOptions(BaseModel):
    """What is watched during a load test (docs/perf.md "Telemetry")."""

    telemetry_interval_s: float = Field(
        1.0, ge=0, description="Scrape the server's /metrics and the local GPUs (NVML) this often; 0: off."
    )
