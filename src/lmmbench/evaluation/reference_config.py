"""Options of `lmmbench reference dump` and `lmmbench reference compare` (pydantic, no heavy imports)."""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from lmmbench.config.common import (
    DEFAULT_OUT_DIR,
    Dtype,
    device_field,
    dtype_field,
    out_dir_field,
    revision_field,
    threads_field,
    with_revision,
)

__all__ = ["CompareConfig", "DumpConfig"]


class DumpConfig(BaseModel):
    """Save first-token logits and the top logit of every generated step for N prompts (the reference)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="tiny model name, local model dir or hub id (ORG/NAME)")
    revision: str | None = revision_field()

    @model_validator(mode="after")
    def _hub_revision(self) -> Self:
        self.model = with_revision(self.model, self.revision)  # type: ignore[assignment]
        return self

    prompts: str = Field("sample_qa", description="task name / task YAML, or a .txt (one per line) or .jsonl file")
    num_prompts: int = Field(16, ge=1, description="how many prompts")
    max_new_tokens: int = Field(16, ge=1, description="greedy steps per prompt")
    device: str = device_field()
    dtype: Dtype = dtype_field()
    out: Path = Field(DEFAULT_OUT_DIR / "reference" / "dump", description="folder for reference.json + reference.npz")
    threads: int | None = threads_field()


class CompareConfig(BaseModel):
    """Run the reference's prompts here and report logits / token diffs, PPL and histograms (as ByteMLPerf
    reports them)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="tiny model name, local model dir or hub id (ORG/NAME)")
    revision: str | None = revision_field()

    @model_validator(mode="after")
    def _hub_revision(self) -> Self:
        self.model = with_revision(self.model, self.revision)  # type: ignore[assignment]
        return self

    reference: Path = Field(description="folder written by `lmmbench reference dump`")
    device: str = device_field()
    dtype: Dtype = dtype_field()
    backend_name: str | None = Field(None, description="label for the report's Backend field (default: device/dtype)")
    out_dir: Path = out_dir_field("report.json, PNGs and CSVs go here.", "reference")
    threads: int | None = threads_field()
