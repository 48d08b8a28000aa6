"""The options of `lmmbench eval` (pydantic only, so the CLI can build the command without the runner)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from lmmbench.config.common import (
    Dtype,
    baseline_field,
    device_field,
    dtype_field,
    mlflow_field,
    out_dir_field,
    revision_field,
    threads_field,
    wandb_field,
    with_revision,
)
from lmmbench.config.limits import check_limit

__all__ = ["EvalConfig"]


class EvalConfig(BaseModel):
    """Evaluate a model on accuracy tasks (modes: all = infer + eval + summary; infer; eval)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="tiny model name, local model dir, hub id (ORG/NAME), or "
                              "http(s):// endpoint URL")
    revision: str | None = revision_field()

    @model_validator(mode="after")
    def _hub_revision(self) -> Self:
        self.model = with_revision(self.model, self.revision)
        return self

    tasks: list[str] = Field(
        description="task names (see `lmmbench tasks`), task YAML files (lmmbench's or lm-eval's), lm-eval names"
    )
    include_path: list[Path] = Field(
        default_factory=list, description="folders of lm-evaluation-harness task / group files, looked up by name"
    )
    mode: Literal["all", "infer", "eval"] = "all"
    out_dir: Path = out_dir_field("Runs go to <out-dir>/<timestamp>/.", "eval")
    resume: str | None = Field(None, description="'latest' or a run folder name to resume / re-score")
    batch_size: int = Field(16, ge=1, description="requests per forward (equal lengths only unless --pad-batches)")
    pad_batches: bool = Field(
        False, description="right-pad mixed lengths into one batch (faster; log-likelihoods move by up to ~4e-6)"
    )
    device: str = device_field()
    dtype: Dtype = dtype_field()
    limit: int | None = Field(None, ge=1, description="only the first N samples of each task")
    num_fewshot: int | None = Field(None, ge=0, description="override the tasks' few-shot count")
    group_by: list[str] = Field(default_factory=list, description="extra metadata columns to aggregate by")
    served_model: str | None = Field(None, description="model name on the endpoint (default: first of /v1/models)")
    tokenizer: str | None = Field(None, description="local tokenizer (model name or dir) for an endpoint")
    max_length: int | None = Field(
        None, ge=8, description="context length (default: the model config's; for an endpoint, max_model_len "
        "from its /v1/models; required for rolling perplexity against an endpoint that does not report it)"
    )
    wait_for_server: float = Field(10.0, ge=0, description="seconds to wait for an endpoint that is still starting")
    concurrency: int = Field(8, ge=1, description="parallel requests to an endpoint")
    allow_random_weights: bool = Field(
        False, description="run a shape-only model (random weights: its scores mean nothing) instead of refusing"
    )
    threads: int | None = threads_field()
    baseline: str | None = baseline_field()
    mlflow: str | None = mlflow_field()
    wandb: str | None = wandb_field()

    @model_validator(mode="after")
    def _check_limits(self) -> EvalConfig:
        check_limit("batch_size", self.batch_size, "--batch-size")
        check_limit("concurrency", self.concurrency, "--concurrency")
        check_limit("input_tokens", self.max_length, "--max-length")
        return self
