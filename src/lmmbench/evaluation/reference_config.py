"""Options of `lmmbench reference dump` and `lmmbench reference compare` (pydantic, no heavy imports)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CompareConfig", "DumpConfig"]

Dtype = Literal["float32", "bfloat16", "float16"]


class DumpConfig(BaseModel):
    """Save first-token logits and the top logit of every generated step for N prompts (the reference)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="tiny model name or local model dir")
    prompts: str = Field("sample_qa", description="task name / task YAML, or a .txt (one per line) or .jsonl file")
    num_prompts: int = Field(16, ge=1, description="how many prompts")
    max_new_tokens: int = Field(16, ge=1, description="greedy steps per prompt")
    device: str = "cpu"
    dtype: Dtype = "float32"
    out: Path = Field(Path("outputs/reference"), description="folder for reference.json + reference.npz")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default: torch's)")


class CompareConfig(BaseModel):
    """Run the reference's prompts here and report logits / token diffs, PPL and histograms (seed 001)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="tiny model name or local model dir")
    reference: Path = Field(description="folder written by `lmmbench reference dump`")
    device: str = "cpu"
    dtype: Dtype = "float32"
    backend_name: str | None = Field(None, description="label for the report's Backend field (default: device/dtype)")
    out_dir: Path = Field(Path("outputs/reference_compare"), description="report.json, pngs and csvs go here")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default: torch's)")
