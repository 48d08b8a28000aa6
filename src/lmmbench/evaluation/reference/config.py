"""Options of `lmmbench reference dump` and `lmmbench reference compare` (pydantic, no heavy imports)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Self

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
from lmmbench.config.registry_field import registered_in

_ENGINE = "lmmbench.engines.engine_registry:ENGINES"

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

    prompts: str = Field("sample_qa", description="a CSV of prompts (ByteMLPerf's dataset: a 'question' or "
                         "'prompt' column), a task name / task YAML, or a .txt (one per line) or .jsonl file")
    num_prompts: int = Field(52, ge=1, description="prompts of perplexity and the logits diff (ByteMLPerf: 52; "
                             "fewer when fewer exist)")
    token_diff_prompts: int = Field(16, ge=1, description="the first N of them also generate for the token diff "
                                    "(ByteMLPerf: 16)")
    max_new_tokens: int = Field(16, ge=1, description="greedy steps per token-diff prompt")
    top_k: int = Field(20, ge=1, le=1000, description="top-k log-probabilities kept per step (what a server's "
                       "logprobs are compared with; vLLM and SGLang return up to 20)")
    engine: Annotated[str, registered_in(_ENGINE)] = Field(
        "transformers", description="the in-process engine that runs the reference (a registered one)")
    device: str = device_field()
    dtype: Dtype = dtype_field()
    out: Path = Field(DEFAULT_OUT_DIR / "reference" / "dump", description="folder for reference.json + reference.npz")
    threads: int | None = threads_field()


class CompareConfig(BaseModel):
    """Run the reference's prompts here and report logits / token diffs, PPL and histograms (as ByteMLPerf
    reports them)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="tiny model name, local model dir or hub id (ORG/NAME); with "
                              "--url: the served model's name (default: the reference's model)")
    revision: str | None = revision_field()

    @model_validator(mode="after")
    def _hub_revision(self) -> Self:
        if self.model is not None:
            self.model = with_revision(self.model, self.revision)
        if self.url is not None and self.model_fields_set & {"engine", "device", "dtype", "threads", "revision"}:
            raise ValueError("--url compares a server's log-probabilities: --engine, --device, --dtype, --threads "
                             "and --revision choose an in-process engine; drop them or --url")
        if self.url is None and self.model is None:
            raise ValueError("give --model (an in-process engine runs it) or --url (an OpenAI-compatible server)")
        if self.url is None and "api_key" in self.model_fields_set:
            raise ValueError("--api-key is for --url")
        return self

    reference: Path = Field(description="folder written by `lmmbench reference dump`")
    engine: Annotated[str, registered_in(_ENGINE)] = Field(
        "transformers", description="the registered in-process engine under test (logits and token diff)")
    url: str | None = Field(None, description="an OpenAI-compatible server under test instead: logprob_diff of "
                            "the top-k log-probabilities it returns (/v1/completions)")
    api_key: str | None = Field(None, description="bearer token of --url")
    device: str = device_field()
    dtype: Dtype = dtype_field()
    backend_name: str | None = Field(None, description="label for the report's Backend field (default: "
                                     "engine:device/dtype, or the URL)")
    out_dir: Path = out_dir_field("report.json, PNGs and CSVs go here.", "reference")
    threads: int | None = threads_field()
