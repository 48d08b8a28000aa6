"""The options of `lmmbench eval` (pydantic only, so the CLI can build the command without the runner)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal, Self

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
    #: lm-eval's own spellings of the options it shares, so its command lines run as they are
    CLI_ALIASES: ClassVar[dict[str, tuple[str, ...]]] = {
        "gen_kwargs": ("--gen_kwargs",), "num_fewshot": ("--num_fewshot",), "include_path": ("--include_path",),
        "apply_chat_template": ("--apply_chat_template",), "fewshot_as_multiturn": ("--fewshot_as_multiturn",),
        "system_instruction": ("--system_instruction",), "batch_size": ("--batch_size",),
        "bootstrap_iters": ("--bootstrap_iters",),
    }  # fmt: skip

    model: str | None = Field(None, description="tiny model name, local model dir, hub id (ORG/NAME), or "
                              "http(s):// endpoint URL")
    revision: str | None = revision_field()
    models: list[str] = Field(default_factory=list, description="several models in one run (names, dirs, hub ids "
                              "or URLs; as AISBench's --models): one run folder each under <out-dir>/<model>/ and "
                              "one comparison table, <out-dir>/models_comparison.csv")

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
    mode: Literal["all", "infer", "eval", "perf"] = Field(
        "all", description="all: infer + eval + summary; infer; eval (score a run); perf: the tasks' requests as a "
        "load test of an endpoint (AISBench's --mode perf: infer -> perf summary, no scoring)")
    out_dir: Path = out_dir_field("Runs go to <out-dir>/<timestamp>/.", "eval")
    resume: str | None = Field(None, description="'latest' or a run folder name to resume / re-score")
    batch_size: int = Field(16, ge=1, description="requests per forward (equal lengths only unless --pad-batches)")
    pad_batches: bool = Field(
        False, description="right-pad mixed lengths into one batch (faster; log-likelihoods move by up to ~4e-6)"
    )
    share_context: bool = Field(
        True, description="run each distinct context once and its answer choices on its KV cache (faster; "
        "log-likelihoods move within float32 rounding); --no-share-context runs every input whole"
    )
    truncate: bool = Field(
        True, description="a context longer than the model's window keeps its end, as lm-eval's HF model cuts it "
        "(generation: the last max_length - max_gen_toks tokens); counted per task; --no-truncate refuses it (exit 2)"
    )
    device: str = device_field()
    dtype: Dtype = dtype_field()
    limit: float | None = Field(None, gt=0, allow_inf_nan=False,
                                description="only the first N samples of each task; a fraction below 1 "
                                "takes that share of each task (as lm-eval's --limit)")
    num_fewshot: int | None = Field(None, ge=0, description="override the tasks' few-shot count")
    gen_kwargs: str | None = Field(None, description="generation arguments of lm-eval catalogue tasks, e.g. "
                                   "max_gen_toks=16,temperature=0 (as lm-eval's --gen_kwargs)")
    apply_chat_template: bool = Field(False, description="render lm-eval catalogue prompts with the model's chat "
                                      "template (as lm-eval's --apply_chat_template)")
    fewshot_as_multiturn: bool = Field(False, description="few-shot examples as chat turns (with "
                                       "--apply-chat-template; as lm-eval's --fewshot_as_multiturn)")
    system_instruction: str | None = Field(None, description="a system instruction before every prompt of lm-eval "
                                           "catalogue tasks (as lm-eval's --system_instruction)")
    seed: str | None = Field(None, description="seeds of python random, numpy, torch and few-shot sampling: one "
                             "value for all four, or four comma-separated (as lm-eval's --seed; default "
                             "0,1234,1234,1234; refused where nothing of the run is random)")
    bootstrap_iters: int = Field(100_000, ge=0, description="bootstrap resamples for the stderr of non-mean metrics "
                                 "of lm-eval catalogue tasks (as lm-eval's --bootstrap_iters)")
    group_by: list[str] = Field(default_factory=list, description="extra metadata columns to aggregate by")
    prompt: str | None = Field(None, description="a registered prompt (name@version) asked instead of each "
                               "lmmbench task's doc_to_text; ./prompts/ and ./prompts.lock (docs/prompts.md)")
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

    def seed_values(self) -> tuple[int, int, int, int]:
        """The four seeds (random, numpy, torch, few-shot) of ``--seed``."""
        parts = [p.strip() for p in (self.seed or "0,1234,1234,1234").split(",")]
        if len(parts) == 1:
            parts *= 4
        return int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])

    @model_validator(mode="after")
    def _check_lmeval_options(self) -> EvalConfig:
        parts = [p.strip() for p in (self.seed or "0").split(",")]
        if len(parts) not in (1, 4) or not all(p.lstrip("-").isdigit() for p in parts):
            raise ValueError(f"--seed {self.seed!r}: one integer, or four comma-separated (random, numpy, torch, "
                             "few-shot)")
        if self.limit is not None and self.limit >= 1 and self.limit != int(self.limit):
            raise ValueError(f"--limit {self.limit:g}: a whole number of samples, or a fraction below 1")
        if self.limit is not None and self.limit >= 1:
            self.limit = int(self.limit)
        return self

    @model_validator(mode="after")
    def _check_limits(self) -> EvalConfig:
        check_limit("batch_size", self.batch_size, "--batch-size")
        check_limit("concurrency", self.concurrency, "--concurrency")
        check_limit("input_tokens", self.max_length, "--max-length")
        return self
