"""The task file: a YAML mapping validated into ``TaskConfig``.

Field names follow lm-evaluation-harness (``doc_to_text``, ``doc_to_target``, ``doc_to_choice``,
``target_delimiter``, ``fewshot_delimiter``) so that a task reads the same in both tools.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lmmbench.core.errors import UserError

__all__ = [
    "DataSource",
    "FewShot",
    "FilterPipeline",
    "FilterStep",
    "GenerationParams",
    "MetricSpec",
    "TaskConfig",
    "group_columns",
    "group_parts",
    "with_prompt",
]

RequestKind = Literal["generate", "multiple_choice", "loglikelihood", "loglikelihood_rolling"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataSource(_Strict):
    """Where the samples come from."""

    path: str = Field(description="jsonl/json/csv/parquet file or a `datasets` folder, relative to the YAML")
    format: Literal["auto", "jsonl", "json", "csv", "csv_typed", "parquet", "hf_disk"] = Field(
        "auto", description="csv: every cell text; csv_typed: numbers inferred, as `datasets` reads a csv"
    )
    split: str | None = Field(None, description="split of a saved DatasetDict")
    limit: int | None = Field(None, ge=1, description="use only the first N samples")


class FewShot(_Strict):
    """Few-shot examples drawn with a seed (lm-evaluation-harness's sampler semantics)."""

    num: int = Field(0, ge=0)
    seed: int = 1234
    source: DataSource | None = Field(None, description="separate few-shot pool; default: the task's samples")
    sampler: Literal["default", "first_n"] = Field("default", description="random (seeded) or the pool's first n")
    exclude_eval_doc: bool | None = Field(
        None, description="draw n + 1 and drop the evaluated sample (default: when the pool is the task's samples)"
    )


class GenerationParams(_Strict):
    """Generation settings for `generate` tasks (greedy unless ``temperature`` > 0)."""

    max_tokens: int = Field(32, ge=1)
    stop: list[str] = Field(default_factory=lambda: ["\n\n"])
    temperature: float = Field(0.0, ge=0, allow_inf_nan=False, description="0 is greedy; above 0 samples")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling (with temperature > 0)")
    top_k: int = Field(0, ge=0, description="top-k sampling (with temperature > 0); 0 turns it off")
    seed: int | None = Field(None, description="sampling seed (with temperature > 0): each sample draws from its "
                             "own generator seeded from it and its index")
    answer_regex: str | None = Field(None, description="extract the answer: first match, group `regex_group`")
    regex_group: int = 0
    regex_fallback: str = "[invalid]"
    strip: bool = True


class FilterStep(_Strict):
    """One step of an lm-evaluation-harness filter pipeline (``function`` and its options)."""

    function: str
    options: dict[str, Any] = Field(default_factory=dict)


class FilterPipeline(_Strict):
    """A named filter pipeline applied to generated text; its metrics are reported as ``metric,name``."""

    name: str
    steps: list[FilterStep] = Field(default_factory=list)


class MetricSpec(_Strict):
    """A metric of the registry and its options."""

    name: str
    options: dict[str, Any] = Field(default_factory=dict)


class TaskConfig(_Strict):
    """One evaluation task."""

    task: str = Field(description="task name")
    version: int | str = 1
    kind: RequestKind
    description: str = ""
    licence: str | None = None
    data: DataSource
    doc_to_text: str = Field("", description="Jinja2 template or column of the prompt")
    prompt: str | None = Field(None, description="a registered prompt (name@version) used as doc_to_text "
                               "(evaluation.prompt_registry)")
    prompt_record: dict[str, str] | None = Field(None, description="name, version and sha256 of the prompt used "
                                                 "(set when the task is loaded)")
    doc_to_target: str | int = Field("", description="Jinja2 template or column of the answer, or a choice index")
    doc_to_choice: str | list[str] | None = Field(None, description="column, template rendering a list, or list")
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    fewshot: FewShot = Field(default_factory=lambda: FewShot.model_validate({}))
    chat_template: bool = Field(
        False, description="wrap the prompt in the model's chat template (generate, multiple_choice, loglikelihood)"
    )
    fewshot_as_multiturn: bool = Field(True, description="with a chat template: examples as separate turns")
    system_prompt: str | None = Field(None, description="system instruction before the description: a system "
                                      "message with a chat template, else the start of the prompt (as lm-eval)")
    image_column: str | None = Field(None, description="column holding an image path (relative to the data)")
    audio_column: str | None = Field(None, description="column holding an audio path (relative to the data)")
    generation: GenerationParams = Field(default_factory=lambda: GenerationParams.model_validate({}))
    metrics: list[MetricSpec] = Field(default_factory=list)
    filters: list[FilterPipeline] = Field(
        default_factory=list, description="lm-eval filter pipelines on generated text (replace answer_regex)"
    )
    group_by: list[str] = Field(default_factory=list, description="metadata columns to aggregate by ('a+b': the "
                                "joint grouping, one group per pair of values)")
    base_dir: Path = Field(Path("."), exclude=True)
    source_file: str = Field("<inline>", exclude=True)

    @field_validator("metrics", mode="before")
    @classmethod
    def _metric_names(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"name": m} if isinstance(m, str) else m for m in v]
        return v

    def default_metrics(self) -> list[MetricSpec]:
        """The metrics to compute: the configured ones, or the kind's defaults."""
        if self.metrics:
            return self.metrics
        defaults = {
            "multiple_choice": ["acc", "acc_norm"],
            "loglikelihood": ["perplexity", "acc"],
            "loglikelihood_rolling": ["word_perplexity", "byte_perplexity", "bits_per_byte"],
            "generate": ["exact_match"],
        }[self.kind]
        return [MetricSpec(name=n) for n in defaults]

    def fingerprint(self) -> str:
        """A short hash of everything that changes what is asked of the model (not the metrics, the
        groups or ``data.limit``: a longer limit resumes a shorter run)."""
        exclude: Any = {"metrics": True, "group_by": True, "data": {"limit"}, "prompt": True, "prompt_record": True}
        blob = json.dumps(self.model_dump(mode="json", exclude=exclude), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def resolve(self, rel: str) -> Path:
        """A data path relative to the task file."""
        p = Path(rel).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)


def with_prompt(cfg: TaskConfig, ref: str, base_dir: Path) -> TaskConfig:
    """``cfg`` asking with the registered prompt ``ref`` (checked against ``base_dir``'s prompts.lock)."""
    from lmmbench.evaluation.prompt_registry import use_prompt

    try:
        prompt = use_prompt(ref, base_dir)
    except UserError as exc:
        raise UserError(f"{cfg.source_file}: {exc}") from None
    return cfg.model_copy(update={"prompt": prompt.ref, "doc_to_text": prompt.text, "prompt_record": prompt.record()})


def group_parts(entry: str) -> list[str]:
    """The columns of one ``group_by`` entry: ``subject`` -> [subject]; ``doc_type+field_name`` (the joint
    grouping: one group per pair of values) -> [doc_type, field_name]."""
    parts = [p.strip() for p in entry.split("+")]
    if not all(parts):
        raise UserError(f"--group-by '{entry}': columns joined by '+' (e.g. doc_type+field_name), none empty")
    twice = next((p for i, p in enumerate(parts) if p in parts[:i]), None)
    if twice is not None:
        raise UserError(f"--group-by '{entry}': the column '{twice}' is named twice; a joint grouping pairs "
                        f"different columns")
    return parts


def check_group_columns(task: str, group_by: list[str], columns: set[str]) -> None:
    """Refuse a ``group_by`` column that no sample of ``task`` has (it would make one "None" group of every
    sample), naming the columns there are."""
    for col in group_columns(group_by):
        if col not in columns:
            raise UserError(f"--group-by: task '{task}' has no column '{col}'; its columns: "
                            f"{', '.join(sorted(columns)) or 'none'}")


def group_columns(group_by: list[str]) -> list[str]:
    """Every metadata column the ``group_by`` entries read, once each, in order."""
    return list(dict.fromkeys(c for entry in group_by for c in group_parts(entry)))
