"""Configuration of ``lmmbench perf``: one pydantic model, from which the CLI is derived."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from lmmbench.config.common import baseline_field, mlflow_field, wandb_field
from lmmbench.config.limits import check_limit
from lmmbench.config.perf.hub_datasets import HubDatasetOptions
from lmmbench.config.perf.shapes import TelemetryOptions, WorkloadShapeOptions
from lmmbench.config.perf.tasks import TaskLoadOptions
from lmmbench.config.perf.vllm import VllmBenchFlags
from lmmbench.config.registry_field import registered_in

__all__ = ["SLO_KEYS", "PerfConfig"]

#: Per-request quantities an SLO can bound (each request must stay at or below the limit).
SLO_KEYS = ("ttft_ms", "ttfvt_ms", "tpot_ms", "itl_ms", "e2e_ms")


class PerfConfig(VllmBenchFlags, WorkloadShapeOptions, TelemetryOptions, HubDatasetOptions, TaskLoadOptions):
    """Load-test an OpenAI-compatible server: open-loop rate or closed-loop concurrency, streamed."""

    model_config = ConfigDict(extra="forbid")
    CLI_ALIASES = {**VllmBenchFlags.CLI_ALIASES, **WorkloadShapeOptions.CLI_ALIASES}
    cli_panels: ClassVar[dict[str, tuple[str, ...]]] = {
        "Server": ("url", "model", "endpoint", "api_key", "server_cmd", "server_per_tp", "hardware_type"),
        "Dataset": ("dataset", "dataset_path", "tokenizer", "input_tokens", "input_tokens_stddev", "output_tokens",
                    "output_tokens_stddev", "ignore_eos", "extra_body", "system_prompt", "workload", "workloads_dir"),
        "Load": ("num_requests", "duration_s", "concurrency", "rate", "arrival", "burstiness", "rates",
                 "concurrencies", "warmup_requests", "workers", "timeout_s", "seed", "spin_us", "loop",
                 "continuous_usage"),
        "Evaluation tasks": TaskLoadOptions.CLI_PANEL,
        "SLOs and search": ("slo", "slo_attainment", "search_mode", "search_low", "search_high", "search_iterations"),
    }  # fmt: skip

    action: Literal["run", "search", "recover"] = Field(
        "run", description="run: measure the given load(s); search: find the highest load meeting --slo; "
        "recover RUN_DIR: summary and reports from the records.partial.jsonl a killed run left."
    )
    recover_dir: Path | None = Field(None, description="The run folder of `perf recover`.")
    url: str = Field(
        "http://127.0.0.1:8000", description="Server base URL: http://host:port, optionally ending in /v1."
    )
    model: str | None = Field(None, description="Model name; default: the first one the server lists.")
    endpoint: Literal["chat", "completions", "generate"] = Field(
        "chat", description="API to call (generate: SGLang's native /generate).")
    api_key: str | None = Field(None, description="Bearer token (default: $OPENAI_API_KEY if set).")
    # dataset
    dataset: Annotated[str, registered_in("lmmbench.datasets.perf.catalog:PERF_DATASETS")] = Field(
        "synthetic", description="Where prompts come from (docs/perf.md, Workloads; a plugin's data set too)."
    )
    dataset_path: Path | None = Field(None, description="JSONL (sharegpt/jsonl) or manifest CSV (multimodal).")
    tokenizer: Path | None = Field(
        None, description="Local tokenizer dir, tokenizer.json, hub id or a built-in model (tiny-llm) for exact token "
                   "lengths; none: word mode."
    )
    input_tokens: int = Field(128, ge=1, description="Synthetic prompt length (tokens, or words in word mode).")
    input_tokens_stddev: float = Field(0.0, ge=0, description="Normal spread of synthetic input lengths.")
    output_tokens: int | None = Field(
        32, ge=0, description="max_tokens per request (datasets with their own lengths: leave unset with 0)."
    )
    output_tokens_stddev: float = Field(0.0, ge=0, description="Normal spread of output lengths.")
    ignore_eos: bool = Field(True, description="Ask for exactly output_tokens (ignore_eos + min_tokens).")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Extra JSON fields for every request.")
    system_prompt: str | None = Field(None, description="A system message for chat requests.")
    # load
    num_requests: int | None = Field(None, ge=1, description="Measured requests (default 100 without duration).")
    duration_s: float | None = Field(None, gt=0, description="Measure for this long instead of a count.")
    concurrency: int | None = Field(None, ge=1, description="Closed loop with N clients, or cap with --rate.")
    rate: float | None = Field(None, gt=0, description="Open loop: target requests per second.")
    arrival: Annotated[str, registered_in("lmmbench.loadgen.arrivals:ARRIVALS")] = Field(
        "poisson", description="Arrival process of --rate (a plugin's too).")
    burstiness: float = Field(1.0, gt=0, description="Gamma shape (1 = Poisson, <1 burstier).")
    rates: list[float] = Field(default_factory=list, description="Sweep of open-loop rates.")
    concurrencies: list[int] = Field(default_factory=list, description="Sweep of concurrencies.")
    warmup_requests: int = Field(0, ge=0, description="Requests sent before measuring, kept out of metrics.")
    workers: int = Field(1, ge=1, le=64, description="Client processes; each owns a slice of one schedule.")
    executor: Literal["local", "ray"] = Field(
        "local", description="Where the --workers run: local processes, or Ray actors (docs/plans.md).")
    ray_address: str | None = Field(None, description="Ray cluster for --executor ray (default: a local one).")
    timeout_s: float = Field(600.0, gt=0, description="Per-request time-out.")
    seed: int = Field(0, description="Seed of prompts, lengths and arrivals.")
    spin_us: float = Field(
        1000.0, ge=0, description="Without timerfd (not Linux): busy-wait (yielding to I/O) this long before each send."
    )
    loop: Literal["auto", "asyncio", "uvloop"] = Field("auto", description="Event loop (auto: uvloop if there).")
    continuous_usage: bool = Field(True, description="Ask for per-chunk usage when the server accepts it.")
    # SLOs and search
    slo: dict[str, float] = Field(default_factory=dict, description="e.g. ttft_ms=500,tpot_ms=50")
    slo_attainment: float = Field(0.9, gt=0, le=1, description="Fraction of requests that must meet the SLOs.")
    search_mode: Literal["rate", "concurrency"] = Field("rate", description="What perf search varies.")
    search_low: float = Field(1.0, gt=0, description="Lowest load tried by perf search.")
    search_high: float = Field(1000.0, gt=0, description="Highest load tried by perf search.")
    search_iterations: int = Field(7, ge=1, le=30, description="Probes after the bracket (bisection steps).")
    # workloads and output
    workload: Path | None = Field(None, description="Workload YAML, or a ByteMLPerf workload JSON.")
    workloads_dir: Path | None = Field(
        None, description="Where a bare --workload NAME is found as NAME.json (default: ./workloads, then "
        "ByteMLPerf's llm_perf/workloads under the working directory)."
    )
    server_cmd: str | None = Field(
        None, description="Command that starts the server, with {tp}/{batch}/{port}. A ByteMLPerf workload: a fresh "
        "server for the accuracy run and for every point, {batch} that point's batch (as ByteMLPerf's launcher); "
        "otherwise one per tp size, {batch} the largest batch (concurrency) of its points."
    )
    server_per_tp: bool = Field(
        False, description="A ByteMLPerf workload: one server per tp size, {batch} its largest batch, instead of a "
        "fresh one per point (a speed-up, recorded in report.json and run.json)."
    )
    hardware_type: str | None = Field(
        None, max_length=100, description="report.json's Backend, as ByteMLPerf's --hardware_type (default: GPU "
        "when this machine has an NVIDIA GPU, else CPU; recorded as detected)."
    )
    reference: Path | None = Field(
        None, description="A `lmmbench reference dump` folder (made from the workload's dataset): a ByteMLPerf "
        "workload's test_accuracy checks the server against it first (at min_tp_size, batch 1)."
    )
    tp_label_only: bool = Field(
        False, description="Measure the one server at --url under each of a workload's several tp sizes, the tp a "
        "label only (stated in every row); without it such a workload needs --server-cmd."
    )
    out_dir: Path = Field(Path("lmmbench-results"), description="Results go to <out-dir>/perf/<run-name>/.")
    run_name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=200,
                                 description="Run folder name (default: a timestamp): letters, digits, _ . - only, "
                                 "a name under <out-dir>/perf/, never a path.")
    overwrite: bool = Field(False, description="Replace the run in <out-dir>/perf/<run-name>/ (default: refuse).")
    resume: bool = Field(False, description="Continue the run in <out-dir>/perf/<run-name>/: finished points are kept.")
    wait_for_server: float = Field(
        10.0, ge=0, description="Wait up to this many seconds for a server that is still starting."
    )
    keep_text: bool = Field(False, description="Keep generated text in the records.")
    plots: bool = Field(True, description="Write PNG plots (needs matplotlib).")
    progress: bool = Field(True, description="Live progress line on stderr.")
    labels: dict[str, Any] = Field(default_factory=dict, description="Labels copied to every record and row.")
    baseline: str | None = baseline_field()
    mlflow: str | None = mlflow_field()
    wandb: str | None = wandb_field()

    @field_validator("slo")
    @classmethod
    def _check_slo(cls, v: dict[str, float]) -> dict[str, float]:
        out = {}
        for k, limit in v.items():
            if k not in SLO_KEYS:
                raise ValueError(f"unknown SLO '{k}'; known: {', '.join(SLO_KEYS)}")
            out[k] = float(limit)
        return out

    @field_validator("server_cmd")
    @classmethod
    def _server_cmd(cls, v: str | None) -> str | None:
        if v is not None:
            from lmmbench.core.placeholders import server_command_check

            server_command_check(v, ("port", "host", "model", "tp", "batch", "python"),
                                 "'vllm serve MODEL --tensor-parallel-size {tp} --port {port}'")
        return v

    @field_validator("extra_body", mode="before")
    @classmethod
    def _json_values(cls, v: Any) -> Any:
        import json

        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if isinstance(x, str):
                    with contextlib.suppress(ValueError):
                        x = json.loads(x)
                out[k] = x
            return out
        return v

    @model_validator(mode="after")
    def _check(self) -> PerfConfig:
        if self.dataset in ("sharegpt", "jsonl", "multimodal", "trace") and self.dataset_path is None:
            raise ValueError(f"dataset '{self.dataset}' needs --dataset-path")
        if self.search_low >= self.search_high:
            raise ValueError("search_low must be below search_high")
        if self.output_tokens == 0:
            self.output_tokens = None
        if self.rate is not None and math.isinf(self.rate) and self.num_requests is None and self.duration_s:
            raise ValueError("--rate inf sends every request at once: give --num-requests, not only --duration-s")
        self._check_limits()
        return self

    def _check_limits(self) -> None:
        """Every count and size within ``lmmbench.config.limits`` (a typo fails here, not in the allocator)."""
        for name, value, what in (
            ("concurrency", max([self.concurrency or 0, *self.concurrencies]), "--concurrency"),
            ("requests", (self.num_requests or 0) + self.warmup_requests, "--num-requests + --warmup-requests"),
            ("input_tokens", self.input_tokens, "--input-tokens"),
            ("output_tokens", self.output_tokens, "--output-tokens"),
            ("sweep_points", max(len(self.rates), len(self.concurrencies)), "sweep length"),
            ("duration_s", self.duration_s, "--duration-s"),
        ):
            check_limit(name, value, what)
        if self.search_mode == "concurrency" and self.action == "search":
            check_limit("concurrency", self.search_high, "--search-high")

    def load_points(self) -> list[dict[str, Any]]:
        """The (rate or concurrency) points of a sweep given on the command line; [{}] for one point."""
        if self.rates:
            return [{"rate": r} for r in self.rates]
        if self.concurrencies:
            return [{"concurrency": c} for c in self.concurrencies]
        return [{}]
