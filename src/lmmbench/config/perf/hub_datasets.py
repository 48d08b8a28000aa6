"""Options of vLLM's ``hf`` and ``spec_bench`` data sets (inherited by ``PerfConfig``; vLLM's flag names)."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["HubDatasetOptions"]


class HubDatasetOptions(BaseModel):
    """Knobs of the ``hf``, ``spec_bench`` and ``burstgpt`` datasets (lmmbench.datasets.vllm.hub_datasets)."""

    hf_name: str | None = Field(None, description="hf: the Hugging Face data set (default: --dataset-path).")
    hf_split: str | None = Field(None, description="hf: split (default: the one vLLM uses for that data set).")
    hf_subset: str | None = Field(None, description="hf: subset / config name (default: vLLM's).")
    hf_output_len: int | None = Field(
        None, ge=1, description="hf: output tokens per request (default: vLLM's for that data set).")
    spec_bench_category: str | None = Field(None, description="spec_bench: only rows of this category.")
    spec_bench_output_len: int = Field(256, ge=1, description="spec_bench: output tokens per request.")
